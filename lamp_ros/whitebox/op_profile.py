"""Op-level profiles from inside compiled groups, where the backend exposes them.

The runtime times whole groups; what a group spends its time on is only visible to its backend.
ONNX Runtime: a second session of the group, built like `OrtRunner` builds its own (weights
bound from safetensors, full graph optimisation) but with `enable_profiling`, runs the group's
captured inputs a few times; its profile JSON gives every kernel's duration and op type, and the
exported ONNX node names (`/vision/...`) tell which graph stage a kernel belongs to. TensorRT:
the engine inspector JSON written at build time lists the layers (no durations). CUDA (the cuda
backend's CUDA graphs): a child process (kernel_profile.py) replays the group under torch's
profiler, whose CUPTI records report each kernel of a graph replay with its own duration; the
kernels are tabled by name here (no stage split: the graph's kernels do not carry their FX
node) and the last replay drawn as a timeline. Each op type or kernel gets a
hint: GEMM-like kernels are compute-bound, elementwise / data-movement kernels are
memory-bound (low arithmetic intensity: they stream bytes and do a few flops per element). A
rule of thumb: at a few rows (the expert's 50) a GEMM streams its weights and is bound by
latency, which the CUDA timeline shows and the hint does not.
"""

from collections import defaultdict
import gzip
import json
import os
import shutil
import tempfile

import numpy as np

from lamp_ros.backends.onnxrt import OrtRunner

COMPUTE_BOUND = ('MatMul', 'Gemm', 'Conv', 'ConvTranspose', 'Einsum', 'Attention',
                 'MultiHeadAttention', 'GroupQueryAttention', 'FusedMatMul', 'FusedGemm',
                 'FusedConv', 'MatMulInteger', 'MatMulNBits', 'QLinearMatMul', 'QLinearConv',
                 'QAttention', 'QGemm')
MEMORY_BOUND = ('Add', 'Sub', 'Mul', 'Div', 'Pow', 'Sqrt', 'Reciprocal', 'Neg', 'Abs', 'Exp',
                'Log', 'Sin', 'Cos', 'Tanh', 'Erf', 'Sigmoid', 'Relu', 'Gelu', 'FastGelu',
                'BiasGelu', 'Where', 'Equal', 'Less', 'Greater', 'Not', 'And', 'Or', 'Max',
                'Min', 'Clip', 'Cast', 'Transpose', 'Reshape', 'Squeeze', 'Unsqueeze',
                'Flatten', 'Expand', 'Tile', 'Concat', 'Split', 'Slice', 'Gather',
                'GatherElements', 'ScatterND', 'Identity', 'Shape', 'Range', 'ConstantOfShape',
                'Trilu', 'Pad', 'CumSum', 'Softmax', 'LayerNormalization',
                'SimplifiedLayerNormalization', 'SkipLayerNormalization',
                'SkipSimplifiedLayerNormalization', 'RotaryEmbedding', 'ReduceMean', 'ReduceSum',
                'ReduceMax', 'MemcpyToHost', 'MemcpyFromHost', 'ReorderInput', 'ReorderOutput')
TRT_COMPUTE = ('conv', 'gemm', 'matmul', 'mha', 'attention', 'fmha', 'cask')
TRT_MEMORY = ('reformat', 'pointwise', 'shuffle', 'copy', 'slice', 'concat', 'gather',
              'softmax', 'norm', 'reduce', 'elementwise', 'cast')


def hint(op_type: str) -> str:
    """'compute-bound', 'memory-bound' or '' for an ONNX op type."""
    if op_type in COMPUTE_BOUND:
        return 'compute-bound'
    return 'memory-bound' if op_type in MEMORY_BOUND else ''


def trt_hint(layer_type: str) -> str:
    low = layer_type.lower()
    if any(k in low for k in TRT_COMPUTE):
        return 'compute-bound'
    return 'memory-bound' if any(k in low for k in TRT_MEMORY) else ''


# ---- ONNX Runtime ----------------------------------------------------------------------------

def kernel_events(events: list) -> tuple:
    """(kernel events of every run but the first, which pays for allocation and warm-up;
    the number of runs they cover)."""
    runs = sorted((e['ts'], e['ts'] + e['dur']) for e in events if e.get('name') == 'model_run')
    kernels = [e for e in events
               if e.get('cat') == 'Node' and e.get('name', '').endswith('_kernel_time')]
    if len(runs) > 1:
        kernels = [e for e in kernels if e['ts'] >= runs[1][0]]
    return kernels, max(len(runs) - 1, 1)


def _stage_of(node_name: str, stages) -> str:
    head = node_name.lstrip('/').split('/', 1)[0]
    return head if node_name.startswith('/') and head in stages else '(group glue)'


def ort_op_profile(group, root: str, feeds: dict, runs: int = 5) -> dict:
    """Per op type, per ONNX node and per graph stage: ms per run, calls, share, hint."""
    workdir = tempfile.mkdtemp(prefix='lamp-ort-profile-')
    try:
        runner = OrtRunner(group, root, 'cpu',  # keeps the weights alive with the session
                           profile_prefix=os.path.join(workdir, group.name))
        session, inputs = runner.session_for(feeds)  # at the prompt's length
        inputs = {v: np.require(inputs[v], requirements='C') for v in group.inputs}
        for _ in range(max(runs, 1) + 1):
            session.run(None, inputs)
        written = {s: s.end_profiling() for s in runner.sessions.values()}
        with open(written[session], encoding='utf-8') as f:
            kernels, measured = kernel_events(json.load(f))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    total_us = sum(e['dur'] for e in kernels) or 1
    by_type, by_node, by_stage = defaultdict(lambda: [0, 0]), defaultdict(lambda: [0, '']), {}
    for e in kernels:
        op = e['args'].get('op_name', '?')
        by_type[op][0] += e['dur']
        by_type[op][1] += 1
        name = e['name'].removesuffix('_kernel_time')
        by_node[name][0] += e['dur']
        by_node[name][1] = op
        stage = by_stage.setdefault(_stage_of(name, group.nodes),
                                    {'us': 0, 'compute_us': 0, 'ops': defaultdict(int)})
        stage['us'] += e['dur']
        stage['compute_us'] += e['dur'] if hint(op) == 'compute-bound' else 0
        stage['ops'][op] += e['dur']
    ops = [{'op_type': op, 'ms': us / measured / 1e3, 'calls': calls // measured,
            'pct': 100.0 * us / total_us, 'hint': hint(op)}
           for op, (us, calls) in sorted(by_type.items(), key=lambda kv: -kv[1][0])]
    nodes = [{'onnx_node': name, 'op_type': op, 'ms': us / measured / 1e3,
              'pct': 100.0 * us / total_us, 'hint': hint(op)}
             for name, (us, op) in sorted(by_node.items(), key=lambda kv: -kv[1][0])[:50]]
    stages = {}
    for stage, s in by_stage.items():
        top = max(s['ops'].items(), key=lambda kv: kv[1])[0]
        compute = s['compute_us'] / max(s['us'], 1)
        stages[stage] = {'share': s['us'] / total_us, 'kernel_ms': s['us'] / measured / 1e3,
                         'compute_pct': 100.0 * compute, 'top_op': top,
                         'hint': 'compute-bound' if compute >= 0.5 else 'memory-bound'}
    return {'group': group.name, 'backend': group.backend, 'source': 'onnxruntime profiling',
            'runs': measured, 'kernel_ms': total_us / measured / 1e3, 'ops': ops,
            'onnx_nodes': nodes, 'stages': stages}


# ---- TensorRT --------------------------------------------------------------------------------

def trt_layer_profile(group, root: str) -> dict | None:
    """Layer types of a TensorRT engine from its inspector JSON (no timings), or None."""
    rel = group.build.get('inspector')
    if not rel or not os.path.isfile(os.path.join(root, rel)):
        return None
    with open(os.path.join(root, rel), encoding='utf-8') as f:
        info = json.load(f)
    counts = defaultdict(int)
    for layer in info.get('Layers', []):
        kind = layer.get('LayerType', 'unknown') if isinstance(layer, dict) else 'unknown'
        counts[kind] += 1
    layers = [{'layer_type': k, 'count': n, 'hint': trt_hint(k)}
              for k, n in sorted(counts.items(), key=lambda kv: -kv[1])]
    return {'group': group.name, 'backend': group.backend, 'source': f'inspector {rel}',
            'layers': layers, 'layer_count': sum(counts.values())}


# ---- CUDA (torch profiler / CUPTI) ----------------------------------------------------------

CUDA_GEMM_LIKE = ('gemm', 'gemv', 'nvjet', 'cutlass', 'xmma', 'sdpa', 'fmha', 'flash',
                  'attention', 'mqa', 'premade', 'conv')
GPU_CATEGORIES = ('kernel', 'gpu_memset', 'gpu_memcpy')


def cuda_hint(kernel: str) -> str:
    low = kernel.lower()
    return 'compute-bound' if any(k in low for k in CUDA_GEMM_LIKE) else 'memory-bound'


def read_trace(path: str) -> dict:
    """A Chrome trace, plain or gzipped (.gz)."""
    opener = gzip.open if path.endswith('.gz') else open
    with opener(path, 'rt', encoding='utf-8') as f:
        return json.load(f)


def gpu_events(trace: dict) -> list:
    """The GPU's complete events of a torch-profiler trace (kernels, memsets, copies) as
    (name, stream, start us, us), in start order."""
    found = [(e['name'], e.get('args', {}).get('stream', e.get('tid')), float(e['ts']),
              float(e.get('dur', 0.0)))
             for e in trace['traceEvents']
             if e.get('ph') == 'X' and e.get('cat') in GPU_CATEGORIES]
    if not found:
        raise ValueError('the trace holds no GPU kernels (was it taken with CUDA activity?)')
    return sorted(found, key=lambda e: e[2])


def busy_us(events: list) -> float:
    """How long at least one GPU event ran: the union of their intervals. Less than the sum of
    their durations when streams overlap, or when a kernel under programmatic dependent launch
    starts before the one it waits for has ended (its duration then holds that wait)."""
    total, end = 0.0, float('-inf')
    for _, _, start, dur in events:  # in start order
        if start + dur > end:
            total += start + dur - max(start, end)
            end = start + dur
    return total


def time_by_name(events: list) -> dict:
    """kernel name -> (total us, calls), largest total first."""
    totals = defaultdict(lambda: [0.0, 0])
    for name, _, _, dur in events:
        totals[name][0] += dur
        totals[name][1] += 1
    return dict(sorted(((n, tuple(v)) for n, v in totals.items()), key=lambda kv: -kv[1][0]))


def replays(events: list, runs: int) -> list:
    """The events of `runs` back-to-back replays of the same CUDA graphs, one list each: a
    replay launches the same nodes every time, so the events cut into equal runs in start
    order. Refused when they do not divide (not replays of one set of graphs)."""
    if runs < 1 or len(events) % runs:
        raise ValueError(f'{len(events)} GPU events are not {runs} replays of the same graphs')
    size = len(events) // runs
    return [events[i * size:(i + 1) * size] for i in range(runs)]


def cuda_kernel_table(per_run: list) -> dict:
    """Per kernel name over the replays (`replays`' lists): ms and calls per replay, share,
    hint; and the last replay's launches, span and busy time."""
    runs, events = len(per_run), [e for run in per_run for e in run]
    total_us = sum(d for *_, d in events) or 1.0
    ops = [{'op_type': name, 'ms': us / runs / 1e3, 'calls': calls // runs,
            'pct': 100.0 * us / total_us, 'hint': cuda_hint(name)}
           for name, (us, calls) in time_by_name(events).items()]
    last = per_run[-1]
    return {'runs': runs, 'kernel_ms': total_us / runs / 1e3,
            'busy_ms': busy_us(last) / 1e3,
            'span_ms': (max(s + d for _, _, s, d in last) - last[0][2]) / 1e3,
            'launches': len(last), 'ops': ops}


def cuda_kernel_profile(group, root: str, runs: int, trace_path: str) -> dict:
    """The group's CUDA graphs replayed `runs` times under the profiler, in a process of its
    own (kernel_profile.py writes the Chrome trace to trace_path) -> kernel table; its last
    replay drawn beside the trace."""
    from lamp_ros.whitebox.kernel_profile import trace
    from lamp_ros.whitebox.plots import write_kernel_timeline
    trace(root, trace_path, group=group.name, runs=runs)
    per_run = replays(gpu_events(read_trace(trace_path)), runs)
    table = cuda_kernel_table(per_run)
    png = trace_path.removesuffix('.json') + '.png'
    write_kernel_timeline(per_run[-1], png,
                          title=f'{group.name}, one replay of its CUDA graphs')
    return {'group': group.name, 'backend': group.backend,
            'source': 'torch profiler (CUPTI), CUDA-graph replays', **table,
            'trace': trace_path, 'timeline': png}


def backend_op_profiles(runtime, feeds: dict, runs: int = 5, folder: str = '') -> dict:
    """group name -> op-level profile for every group whose backend exposes one (a cuda
    group's kernel trace and timeline go to FOLDER/GROUP.kernels.json / .png; none without
    a folder)."""
    out = {}
    for group in runtime.artifact.plan.groups:
        if group.backend == 'onnxruntime' and runs > 0:
            out[group.name] = ort_op_profile(group, runtime.artifact.root, feeds, runs)
        elif group.backend == 'cuda' and runs > 0 and folder:
            out[group.name] = cuda_kernel_profile(
                group, runtime.artifact.root, runs,
                os.path.join(folder, f'{group.name}.kernels.json'))
        elif group.backend == 'tensorrt':
            layers = trt_layer_profile(group, runtime.artifact.root)
            if layers:
                out[group.name] = layers
    return out
