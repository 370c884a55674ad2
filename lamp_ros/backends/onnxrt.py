"""ONNX Runtime backend: model groups exported to ONNX, weights bound from safetensors.

Compile side: the group's model stages are wrapped in one module that runs them in graph order and
exported with torch.onnx, by the exporter the spec's `build.onnx_exporter` chooses (the
torch.export-based one where it works, else TorchScript; backends/onnx_export.py), every weight
a named initializer. The weights live once, in weights/<node>.safetensors: each initializer in the
ONNX file becomes external data pointing at its bytes inside that safetensors file (location,
offset, length), so the pair is also a valid ONNX model with external data for other tools.
Precision: fp32, or fp16 (ONNX Runtime's CPU provider runs the tiny model in fp16, with its own
fallback casts where a kernel is missing); the group casts at its boundary, and the fp16 weights,
being derived data, go to groups/<name>/weights.fp16.safetensors.
Prompt lengths (spec `fusion.text_lengths`, backends/text_lengths.py): the group is exported
once more for each listed length, static like the full one (a dynamic ONNX axis made every
call on pi05_tiny slower at every length: shape arithmetic ORT folds away when the shapes are
fixed); the build runs each length's session against the full one (plan.json
`build.text_check`), and each run takes the session of the shortest length that holds the
prompt, the token inputs cut as views: pi05_tiny's example prompt (52 of 96 tokens) runs at 64.
The sessions share the weight OrtValues.
Run side: one InferenceSession per group (and per prompt length); the weights are read with
safetensors' numpy API and handed over with `SessionOptions.add_external_initializers`, so ORT
neither reads nor copies the files itself and still treats the weights as constants. No torch
on the run side.
"""

import dataclasses
import os

import numpy as np

from lamp_ros.backends import text_lengths
from lamp_ros.backends.base import BackendUnavailable, GroupBuild
from lamp_ros.backends.group_module import group_module
from lamp_ros.backends.onnx_export import export_model

NAME = 'onnxruntime'
OPSET = 18
WEIGHT_PREFIX = 'stages.'


def supports(node) -> tuple:
    if node.kind != 'model':
        return False, 'ONNX Runtime runs model stages; host ops run on host'
    return True, 'model stage exportable to ONNX'


def device_for(target: str) -> str:
    return 'cpu'


def weight_file(node_id: str) -> str:
    return f'weights/{node_id}.safetensors'


# ---- compile side ----------------------------------------------------------------------------

def safetensors_offsets(path: str) -> dict:
    """tensor name -> (absolute byte offset, length) inside a safetensors file."""
    import json
    import struct
    with open(path, 'rb') as f:
        (header_len,) = struct.unpack('<Q', f.read(8))
        header = json.loads(f.read(header_len))
    return {name: (8 + header_len + meta['data_offsets'][0],
                   meta['data_offsets'][1] - meta['data_offsets'][0])
            for name, meta in header.items() if name != '__metadata__'}


PRECISIONS = {'fp32': 'float32', 'fp16': 'float16'}


def _weights_for_precision(ctx):
    """(modules, compute dtype, {node: weight file}) for the group's precision."""
    import copy

    import torch
    precision = ctx.group.precision
    if precision not in PRECISIONS:
        raise ValueError(f'onnxruntime: precision {precision!r} is not supported on the CPU '
                         f'provider (supported: {", ".join(PRECISIONS)})')
    if precision == 'fp32':
        return ctx.modules, None, {n: weight_file(n) for n in ctx.group.nodes}
    dtype = getattr(torch, PRECISIONS[precision])
    modules = {n: copy.deepcopy(ctx.modules[n]).to(dtype) for n in ctx.group.nodes}
    from safetensors.torch import save_file
    rel = f'groups/{ctx.group.name}/weights.{precision}.safetensors'
    tensors = {f'{n}.{k}': v.detach().contiguous() for n in ctx.group.nodes
               for k, v in modules[n].state_dict().items()}
    os.makedirs(os.path.join(ctx.root, os.path.dirname(rel)), exist_ok=True)
    save_file(dict(sorted(tensors.items())), os.path.join(ctx.root, rel))
    return modules, dtype, {n: rel for n in ctx.group.nodes}


def export_onnx(ctx, path: str, weights: tuple, length: tuple | None = None) -> tuple:
    """Export the group to `path` with weights as external data in safetensors files;
    return ({initializer name: {'file': relative path, 'tensor': name in that file}}, the
    exporter used, the torch.export-based exporter's failure where it fell back or None).
    `weights`: what _weights_for_precision made; `length`: (TextAxis, n) to export at a prompt
    of n tokens (the example's token inputs cut to n), static like the full one."""
    import onnx
    import torch

    for node_id in ctx.group.nodes:
        if '.' in node_id:
            raise ValueError(f'onnxruntime: model node id {node_id!r} must not contain "."')
    modules, dtype, files = weights
    module = group_module(ctx.graph, ctx.group, modules, compute_dtype=dtype)
    args = [torch.as_tensor(np.asarray(ctx.example[v])) for v in ctx.group.inputs]
    if length:
        axis, n = length
        args = axis.cut(ctx.group.inputs, args, n)
    exporter = ctx.options.onnx_exporter if ctx.options else 'auto'
    ctx.say(f'{ctx.group.name}: ONNX export by {exporter} ({len(ctx.group.nodes)} stages' +
            (f', {length[1]} prompt tokens)' if length else ')'))
    model, used, failure = export_model(
        module, args, path, OPSET, list(ctx.group.inputs), list(ctx.group.outputs),
        WEIGHT_PREFIX, exporter,
        say=lambda message: ctx.say(f'{ctx.group.name}: {message}'))
    bindings, offsets = {}, {}
    for init in model.graph.initializer:
        if not init.name.startswith(WEIGHT_PREFIX):
            continue
        node_id, _, param = init.name[len(WEIGHT_PREFIX):].partition('.')
        rel = files[node_id]
        key = param if rel == weight_file(node_id) else f'{node_id}.{param}'
        if rel not in offsets:
            offsets[rel] = safetensors_offsets(os.path.join(ctx.root, rel))
        if key not in offsets[rel]:
            raise ValueError(f'{rel}: no tensor {key!r} for ONNX initializer {init.name}')
        bindings[init.name] = {'file': rel, 'tensor': key}
        point_at(init, ctx.root, path, rel, offsets[rel][key])
    model.producer_name = 'lamp_ros'
    model.producer_version = ''
    onnx.save(model, path)
    return bindings, used, failure


def point_at(init, root: str, model_path: str, rel: str, span: tuple) -> None:
    """Make ONNX initializer `init` external data at `span` (offset, length) of the
    safetensors file `rel` (relative to the artifact `root`), from the model at `model_path`."""
    from onnx import TensorProto
    for field in ('raw_data', 'float_data', 'int32_data', 'int64_data', 'double_data'):
        init.ClearField(field)
    init.data_location = TensorProto.EXTERNAL
    del init.external_data[:]
    location = os.path.relpath(os.path.join(root, rel), os.path.dirname(model_path))
    for key, value in (('location', location), ('offset', span[0]), ('length', span[1])):
        entry = init.external_data.add()
        entry.key, entry.value = key, str(value)


def length_file(group: str, n: int) -> str:
    return f'groups/{group}/model.text{n}.onnx'


def compile(ctx) -> GroupBuild:
    rel = f'groups/{ctx.group.name}/model.onnx'
    path = os.path.join(ctx.root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    weights = _weights_for_precision(ctx)
    bindings, exporter, failure = export_onnx(ctx, path, weights)
    axis = text_lengths.text_axis(ctx.graph, ctx.group, ctx.example, ctx.text_lengths)
    by_length = {}
    for n in axis.lengths[:-1] if axis else ():
        by_length[str(n)] = length_file(ctx.group.name, n)
        if export_onnx(ctx, os.path.join(ctx.root, by_length[str(n)]), weights,
                       (axis, n))[:2] != (bindings, exporter):
            raise ValueError(f'{ctx.group.name}: the export at {n} prompt tokens binds other '
                             f'weights, or took another exporter, than the full one')
    derived = {b['file'] for b in bindings.values() if b['file'].startswith('groups/')}
    files = sorted({rel, *by_length.values(), *derived})
    metadata = {'onnx': rel, 'opset': OPSET, 'exporter': exporter,
                'precision': ctx.group.precision,
                'weights': dict(sorted(bindings.items())),
                'text': axis.to_dict() if axis else None, 'text_onnx': by_length or None}
    if axis:
        ctx.say(f'{ctx.group.name}: checking the sessions at prompt lengths '
                f'{list(axis.lengths)}')
        runner = OrtRunner(dataclasses.replace(ctx.group, build=metadata), ctx.root, 'cpu')
        outputs = list(ctx.group.outputs)

        def run(values):
            n = np.shape(values[ctx.group.inputs.index(axis.mask)])[1]
            return runner.sessions[n].run(outputs, dict(zip(ctx.group.inputs, values)))
        errors = text_lengths.check_lengths(ctx.group, axis, ctx.example, run)
        metadata['text_check'] = {str(n): e for n, e in errors.items()}
    evidence = {'exporter_fallback': failure} if failure else {}
    return GroupBuild(files=tuple(files), metadata=metadata, evidence=evidence)


# ---- run side --------------------------------------------------------------------------------

def load_tensors(root: str, rel: str) -> dict:
    """Read a safetensors file with numpy (no torch)."""
    from safetensors.numpy import load_file
    return load_file(os.path.join(root, rel))


class OrtRunner:
    """One InferenceSession for the group, or one per prompt length for a group built with
    them (`sessions`, keyed by length; all of them on the same weight OrtValues); feeds and
    results are numpy arrays by value name."""

    def __init__(self, group, root: str, device: str, threads: int = 0,
                 profile_prefix: str | None = None, probes: tuple = (),
                 optimized_model: str | None = None):
        """profile_prefix: turn on ORT's per-node profiling, writing <prefix>_*.json
        (`lamp profile` uses it; the runtime never does). probes: values inside the group to
        output too (`run_probes`; `lamp diff --layers` reads its layers' inputs and outputs).
        optimized_model: write the graph ORT optimised for the full prompt length's session
        to this file (onnx_int8.py reads which kernels run its int8 weights)."""
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise BackendUnavailable(f'onnxruntime is not installed ({exc})') from exc
        meta = group.build
        by_file = {}
        for name, ref in meta['weights'].items():
            by_file.setdefault(ref['file'], {})[name] = ref['tensor']
        names, self._weights = [], []  # the OrtValues must outlive the sessions
        for rel, wanted in sorted(by_file.items()):
            tensors = load_tensors(root, rel)
            for name, key in sorted(wanted.items()):
                if key not in tensors:
                    raise ValueError(f'{rel}: missing tensor {key!r} needed by group '
                                     f'{group.name}')
                names.append(name)
                self._weights.append(
                    ort.OrtValue.ortvalue_from_numpy(np.require(tensors[key], requirements='C')))
        providers = ['CPUExecutionProvider']
        if device.startswith('cuda') and 'CUDAExecutionProvider' in ort.get_available_providers():
            providers.insert(0, 'CUDAExecutionProvider')

        def session(rel, optimized=None):
            options = ort.SessionOptions()
            options.intra_op_num_threads = threads
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            # No busy-waiting worker threads: on a robot computer the control loop, the drivers
            # and the inference share the cores, and spinning threads steal the tick's time.
            options.add_session_config_entry('session.intra_op.allow_spinning', '0')
            options.add_session_config_entry('session.inter_op.allow_spinning', '0')
            if profile_prefix:
                options.enable_profiling = True
                options.profile_file_prefix = profile_prefix
            if optimized:
                options.optimized_model_filepath = optimized
                options.log_severity_level = 3  # its note that the file suits this machine only
            options.add_external_initializers(names, self._weights)
            # a group with int8 layers runs without the fusions that would undo them
            # (onnx_int8.py DISABLED_OPTIMIZERS)
            disabled = {'disabled_optimizers': meta['disabled_optimizers']} \
                if meta.get('disabled_optimizers') else {}
            model = os.path.join(root, rel)
            if probes:
                model = _with_outputs(model, probes)
            return ort.InferenceSession(model, options, providers=providers, **disabled)

        self.text = text_lengths.TextAxis.from_dict(meta['text']) if meta.get('text') else None
        self.session = session(meta['onnx'], optimized_model)  # the full prompt length
        self.sessions = {self.text.full if self.text else None: self.session}
        for n, rel in (meta.get('text_onnx') or {}).items():
            self.sessions[int(n)] = session(rel)
        if self.text and sorted(self.sessions) != list(self.text.lengths):
            raise ValueError(f'{group.name}: ONNX files for prompt lengths '
                             f'{sorted(self.sessions)}, the group runs at '
                             f'{list(self.text.lengths)}')
        self.inputs = tuple(group.inputs)
        self.outputs = tuple(group.outputs)
        self.probes = tuple(probes)
        self.providers = self.session.get_providers()
        self.last_text_length = None  # until the first run

    def session_for(self, feeds: dict) -> tuple:
        """(session, its feeds): for a group built with prompt lengths, the session of the
        shortest that holds the prompt's valid tokens (`last_text_length`), the token inputs
        cut as views."""
        if self.text is None:
            return self.session, feeds
        length = self.text.length_for(feeds[self.text.mask])
        values = self.text.cut(self.inputs, [feeds[name] for name in self.inputs], length)
        self.last_text_length = length
        return self.sessions[length], dict(zip(self.inputs, values))

    def run(self, feeds: dict, state=None, out=None) -> dict:
        """With `out` (preallocated arrays for every output), ORT writes the results straight
        into them through IOBinding and reads the inputs in place: no copies either way."""
        session, feeds = self.session_for(feeds)
        if not out or any(out.get(v) is None for v in self.outputs):
            results = session.run(list(self.outputs), {name: feeds[name] for name in self.inputs})
            return dict(zip(self.outputs, results))
        binding = session.io_binding()
        for name in self.inputs:
            binding.bind_cpu_input(name, np.require(feeds[name], requirements='C'))
        for name in self.outputs:
            buf = out[name]
            binding.bind_output(name, 'cpu', 0, buf.dtype, list(buf.shape), buf.ctypes.data)
        session.run_with_iobinding(binding)
        return {name: out[name] for name in self.outputs}

    def run_probes(self, feeds: dict) -> dict:
        """The group's outputs and its `probes` for these feeds."""
        session, feeds = self.session_for(feeds)
        names = list(self.outputs + self.probes)
        results = session.run(names, {name: np.asarray(feeds[name]) for name in self.inputs})
        return dict(zip(names, results))


def model_with_weights(group, root: str):
    """The group's ONNX model (its full prompt length) with every bound weight inside it: for
    tools that rewrite or cut the graph (onnx_int8.py, `lamp diff --layers`)."""
    import onnx
    from onnx import numpy_helper
    model = onnx.load(os.path.join(root, group.build['onnx']), load_external_data=False)
    files = {}
    for init in model.graph.initializer:
        ref = group.build['weights'].get(init.name)
        if ref is None:
            continue
        if ref['file'] not in files:
            files[ref['file']] = load_tensors(root, ref['file'])
        init.CopyFrom(numpy_helper.from_array(files[ref['file']][ref['tensor']], init.name))
    return model


def _with_outputs(path: str, names: tuple) -> bytes:
    """The ONNX model at `path` with the values `names` as graph outputs too (serialised;
    its weights stay external, handed to the session by name)."""
    import onnx
    model = onnx.load(path, load_external_data=False)
    known = {o.name for o in model.graph.output}
    model.graph.output.extend(onnx.helper.make_empty_tensor_value_info(n)
                              for n in names if n not in known)
    return model.SerializeToString()


def load(group, ctx):
    return OrtRunner(group, ctx.root, ctx.device, threads=ctx.threads)


def precision_lowering(group, root: str):
    """The int8 lowering a precision plan uses on this backend (onnx_int8.py)."""
    from lamp_ros.backends.onnx_int8 import Int8Lowering
    return Int8Lowering(group, root)
