"""Op-level profiles from inside compiled groups, where the backend exposes them.

The runtime times whole groups; what a group spends its time on is only visible to its backend.
ONNX Runtime: a second session of the group, built like `OrtRunner` builds its own (weights
bound from safetensors, full graph optimisation) but with `enable_profiling`, runs the group's
captured inputs a few times; its profile JSON gives every kernel's duration and op type, and the
exported ONNX node names (`/vision/...`) tell which graph stage a kernel belongs to. TensorRT:
the engine inspector JSON written at build time lists the layers (no durations). Each op type
gets a hint: GEMM-like kernels are compute-bound, elementwise / data-movement kernels are
memory-bound (low arithmetic intensity: they stream bytes and do a few flops per element).
"""

from collections import defaultdict
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
        inputs = {v: np.ascontiguousarray(inputs[v]) for v in group.inputs}
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


def backend_op_profiles(runtime, feeds: dict, runs: int = 5) -> dict:
    """group name -> op-level profile for every group whose backend exposes one."""
    out = {}
    for group in runtime.artifact.plan.groups:
        if group.backend == 'onnxruntime' and runs > 0:
            out[group.name] = ort_op_profile(group, runtime.artifact.root, feeds, runs)
        elif group.backend == 'tensorrt':
            layers = trt_layer_profile(group, runtime.artifact.root)
            if layers:
                out[group.name] = layers
    return out
