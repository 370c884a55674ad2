"""TensorRT backend: model groups built into one strongly typed TensorRT engine each.

Why it looks like this:
- TensorRT 11 networks are always strongly typed (the FP16/BF16/INT8 builder flags are gone), so
  the precision is decided here, before TensorRT sees the model: the group is cast to its
  precision and exported to ONNX carrying the final dtypes, and the network is built exactly as
  typed (STRONGLY_TYPED is still passed, for TensorRT 10 builders; 11 ignores it).
- TensorRT bakes weights into the engine, so unlike the ONNX Runtime backend the ONNX it
  consumes keeps its weights as initializers; the engine file alone is enough to run.
- The engine inspector's JSON (built with ProfilingVerbosity.DETAILED) is the white-box evidence
  of what TensorRT made of the group (fused layers, tactics, dtypes); it is stored beside the
  engine. The timing cache is kept per group, so rebuilding the same group is fast.
TensorRT cannot be installed on our development machines, so tests verify the ONNX this backend
feeds TensorRT with ONNX Runtime (CPU) against the eager module; engine tests need TensorRT.

Compile side imports torch and tensorrt inside the functions. Run side: `tensorrt` (or the lean
runtime `tensorrt_lean`, for engines built with the `version_compatible` option) and cuda-python's
runtime bindings; every buffer is allocated once at load, for the engine's static shapes.
"""

import copy
import ctypes
import os

import numpy as np

from lamp_ros.backends.base import BackendUnavailable, GroupBuild
from lamp_ros.backends.group_module import group_module

NAME = 'tensorrt'
OPSET = 18
TORCH_DTYPES = {'fp32': 'float32', 'bf16': 'bfloat16', 'fp16': 'float16'}
NUMPY_DTYPES = {'FLOAT': 'float32', 'HALF': 'float16', 'BF16': 'bfloat16', 'INT8': 'int8',
                'UINT8': 'uint8', 'INT32': 'int32', 'INT64': 'int64', 'BOOL': 'bool'}


def supports(node) -> tuple:
    if node.kind != 'model':
        return False, 'TensorRT builds model stages; host ops run on host'
    return True, 'model stage exportable to ONNX and buildable by TensorRT'


def device_for(target: str) -> str:
    return 'cuda:0'


def group_dir(group) -> str:
    return f'groups/{group.name}'


# ---- compile side ----------------------------------------------------------------------------

def export_engine_onnx(ctx) -> str:
    """Export the group, cast to its precision, with weights embedded; return the relative path.

    Strongly typed TensorRT builds the dtypes it is given, so casting happens here: module and
    floating inputs go to the group precision, bool/int inputs stay as they are.
    """
    import torch

    precision = ctx.group.precision
    if precision not in TORCH_DTYPES:
        raise ValueError(f'tensorrt: group {ctx.group.name}: precision {precision!r} not in '
                         f'{tuple(TORCH_DTYPES)}')
    dtype = getattr(torch, TORCH_DTYPES[precision])
    module = group_module(ctx.graph, ctx.group, ctx.modules)
    if dtype != torch.float32:
        module = copy.deepcopy(module).to(dtype)  # Module.to casts in place: spare the caller's
    args = []
    for name in ctx.group.inputs:
        value = torch.as_tensor(np.asarray(ctx.example[name]))
        args.append(value.to(dtype) if value.is_floating_point() else value)
    rel = f'{group_dir(ctx.group)}/trt_input.onnx'
    path = os.path.join(ctx.root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    ctx.say(f'{ctx.group.name}: torch.onnx.export for TensorRT ({precision}, weights embedded)')
    with torch.no_grad():
        torch.onnx.export(module, tuple(args), path, dynamo=False, opset_version=OPSET,
                          input_names=list(ctx.group.inputs),
                          output_names=list(ctx.group.outputs))
    return rel


def _parse(trt, network, logger, path: str):
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(path):  # from the file: external weights resolve beside it
        errors = [parser.get_error(i) for i in range(parser.num_errors)]
        lines = [f'  node {e.node_name() or e.node()} ({e.node_operator()}): {e.desc()}'
                 for e in errors]
        raise ValueError(f'tensorrt: cannot parse {path}:\n' + '\n'.join(lines or ['  ?']))
    return parser


def _io_table(trt, engine) -> dict:
    io = {}
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        dtype = engine.get_tensor_dtype(name).name
        mode = engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
        io[name] = {'dtype': NUMPY_DTYPES.get(dtype, dtype),
                    'shape': [int(d) for d in engine.get_tensor_shape(name)],
                    'mode': 'input' if mode else 'output'}
    return io


def compile(ctx) -> GroupBuild:
    """ONNX with weights -> strongly typed network -> engine, timing cache, inspector JSON.

    Options read from `ctx.group.build`: workspace_bytes (memory pool limit), tf32 (allow TF32
    in fp32 groups; off by default so fp32 keeps fp32 parity), version_compatible (needed to
    run on the lean runtime).
    """
    try:
        import tensorrt as trt
    except ImportError as exc:
        raise BackendUnavailable(f'tensorrt is not installed: {exc}') from exc
    options, group = ctx.group.build, ctx.group
    rel = {'onnx': export_engine_onnx(ctx), 'engine': f'{group_dir(group)}/model.engine',
           'inspector': f'{group_dir(group)}/inspector.json',
           'timing_cache': f'{group_dir(group)}/timing.cache'}
    path = {key: os.path.join(ctx.root, r) for key, r in rel.items()}

    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
    parser = _parse(trt, network, logger, path['onnx'])  # owns the weights until the build
    config = builder.create_builder_config()
    config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
    if options.get('workspace_bytes'):
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE,
                                     int(options['workspace_bytes']))
    tf32 = bool(options.get('tf32', False))
    if group.precision == 'fp32' and not tf32:
        config.clear_flag(trt.BuilderFlag.TF32)
    version_compatible = bool(options.get('version_compatible', False))
    if version_compatible:
        config.set_flag(trt.BuilderFlag.VERSION_COMPATIBLE)
    cached = b''
    if os.path.exists(path['timing_cache']):
        with open(path['timing_cache'], 'rb') as f:
            cached = f.read()
    config.set_timing_cache(config.create_timing_cache(cached), False)

    ctx.say(f'{group.name}: TensorRT {trt.__version__} build ({group.precision})')
    plan = builder.build_serialized_network(network, config)
    if plan is None:
        raise RuntimeError(f'tensorrt: building group {group.name} failed (see TensorRT log)')
    del parser
    plan = bytes(plan)
    with open(path['engine'], 'wb') as f:
        f.write(plan)
    with open(path['timing_cache'], 'wb') as f:
        f.write(bytes(config.get_timing_cache().serialize()))

    runtime = trt.Runtime(logger)
    if version_compatible:
        runtime.engine_host_code_allowed = True  # our own plan; it embeds the lean runtime
    engine = runtime.deserialize_cuda_engine(plan)
    if engine is None:
        raise RuntimeError(f'tensorrt: {rel["engine"]}: the engine just built does not load')
    info = engine.create_engine_inspector().get_engine_information(
        trt.LayerInformationFormat.JSON)
    with open(path['inspector'], 'w') as f:
        f.write(info)
    return GroupBuild(files=tuple(rel.values()), metadata={
        **rel, 'tensorrt_version': trt.__version__, 'precision': group.precision,
        'engine_bytes': len(plan), 'tf32': tf32, 'version_compatible': version_compatible,
        'io': _io_table(trt, engine)})


# ---- run side --------------------------------------------------------------------------------

def numpy_dtype(name: str) -> np.dtype:
    """numpy dtype of an io table entry; bfloat16 comes from ml_dtypes."""
    if name == 'bfloat16':
        try:
            import ml_dtypes
        except ImportError as exc:
            raise BackendUnavailable('tensorrt: bfloat16 tensors need ml_dtypes '
                                     f'(pip install ml_dtypes): {exc}') from exc
        return np.dtype(ml_dtypes.bfloat16)
    if name not in NUMPY_DTYPES.values():
        raise ValueError(f'tensorrt: tensor dtype {name} has no numpy equivalent')
    return np.dtype(name)


def _check(result, what: str):
    """cuda-python calls return (error, *values): raise on error, return the value."""
    from cuda.bindings import runtime as cudart

    err = result[0]
    if err != cudart.cudaError_t.cudaSuccess:
        raise RuntimeError(f'tensorrt: {what} failed: {err.name}')
    return result[1] if len(result) > 1 else None


class TrtRunner:
    """One engine and context; buffers, pinned staging arrays and a stream made once."""

    def __init__(self, group, root: str, device: str):
        meta = group.build
        path = os.path.join(root, meta['engine'])
        size = os.path.getsize(path)
        if size != meta.get('engine_bytes', size):
            raise ValueError(f'{path}: engine file has {size} bytes, the build wrote '
                             f'{meta["engine_bytes"]}: truncated or replaced')
        try:
            import tensorrt as trt
        except ImportError:
            try:
                import tensorrt_lean as trt
            except ImportError as exc:
                raise BackendUnavailable(
                    f'tensorrt is not installed (nor tensorrt_lean): {exc}') from exc
            if not meta.get('version_compatible'):
                raise BackendUnavailable('tensorrt is not installed; tensorrt_lean runs only '
                                         'engines built with the version_compatible option')
        try:
            from cuda.bindings import runtime as cudart
        except ImportError as exc:
            raise BackendUnavailable(f'tensorrt: cuda-python (cuda.bindings) is not installed: '
                                     f'{exc}') from exc
        self._cudart, self.name = cudart, group.name
        self._device, self._pinned, self._host, self._stream = {}, {}, {}, None
        _check(cudart.cudaSetDevice(int(device.partition(':')[2] or 0)), f'cudaSetDevice {device}')

        self._logger = trt.Logger(trt.Logger.WARNING)
        self._runtime = trt.Runtime(self._logger)
        if meta.get('version_compatible'):
            self._runtime.engine_host_code_allowed = True
        with open(path, 'rb') as f:
            self.engine = self._runtime.deserialize_cuda_engine(f.read())
        if self.engine is None:
            raise ValueError(f'{path}: TensorRT {trt.__version__} cannot deserialize this engine '
                             f'(built with {meta.get("tensorrt_version")}; see the log above)')
        self.context = self.engine.create_execution_context()
        self.io = _io_table(trt, self.engine)
        self.inputs = tuple(n for n, t in self.io.items() if t['mode'] == 'input')
        self.outputs = tuple(n for n, t in self.io.items() if t['mode'] == 'output')
        missing = [v for v in group.outputs if v not in self.outputs]
        if missing:
            raise ValueError(f'{path}: engine lacks outputs {missing} of group {group.name}')
        try:
            self._stream = _check(cudart.cudaStreamCreate(), 'cudaStreamCreate')
            for name, t in self.io.items():
                self._allocate(name, tuple(t['shape']), numpy_dtype(t['dtype']))
        except Exception:
            self.close()
            raise

    def _allocate(self, name: str, shape: tuple, dtype: np.dtype):
        if any(d < 0 for d in shape):
            raise ValueError(f'tensorrt: tensor {name} has dynamic shape {list(shape)}; '
                             'this backend builds static shapes only')
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        self._device[name] = _check(self._cudart.cudaMalloc(max(nbytes, 1)), f'cudaMalloc {name}')
        self._pinned[name] = _check(self._cudart.cudaMallocHost(max(nbytes, 1)),
                                    f'cudaMallocHost {name}')
        raw = (ctypes.c_uint8 * max(nbytes, 1)).from_address(int(self._pinned[name]))
        self._host[name] = np.frombuffer(raw, np.uint8, count=nbytes).view(dtype).reshape(shape)
        if not self.context.set_tensor_address(name, int(self._device[name])):
            raise RuntimeError(f'tensorrt: set_tensor_address({name}) refused')

    def _copy(self, dst, src, array: np.ndarray, kind: str):
        kinds = self._cudart.cudaMemcpyKind
        _check(self._cudart.cudaMemcpyAsync(dst, src, array.nbytes, getattr(kinds, kind),
                                            self._stream), kind)

    def run(self, feeds: dict, state=None, out=None) -> dict:
        for name in self.inputs:
            if name not in feeds:
                raise ValueError(f'tensorrt {self.name}: missing input {name!r}; '
                                 f'given: {", ".join(sorted(feeds))}')
            value, host = np.asarray(feeds[name]), self._host[name]
            if value.shape != host.shape or value.dtype != host.dtype:
                raise ValueError(f'tensorrt {self.name}: input {name!r} is {value.dtype}'
                                 f'{list(value.shape)}, the engine takes {host.dtype}'
                                 f'{list(host.shape)}')
            np.copyto(host, value)
            self._copy(self._device[name], self._pinned[name], host, 'cudaMemcpyHostToDevice')
        if not self.context.execute_async_v3(int(self._stream)):
            raise RuntimeError(f'tensorrt {self.name}: execute_async_v3 failed (see log)')
        for name in self.outputs:
            self._copy(self._pinned[name], self._device[name], self._host[name],
                       'cudaMemcpyDeviceToHost')
        _check(self._cudart.cudaStreamSynchronize(self._stream), 'cudaStreamSynchronize')
        return {name: self._host[name].copy() for name in self.outputs}  # staging is reused

    def close(self) -> None:
        """Free device buffers, pinned memory and the stream (safe to call twice)."""
        cudart = self._cudart
        for name, ptr in self._device.items():
            _check(cudart.cudaFree(ptr), f'cudaFree {name}')
        for name, ptr in self._pinned.items():
            _check(cudart.cudaFreeHost(ptr), f'cudaFreeHost {name}')
        if self._stream is not None:
            _check(cudart.cudaStreamDestroy(self._stream), 'cudaStreamDestroy')
        self._device, self._pinned, self._host, self._stream = {}, {}, {}, None


def load(group, ctx):
    return TrtRunner(group, ctx.root, ctx.device)
