"""Op-level subgraphs of model stages with torch.export, and the hashes of their weights."""

from concurrent.futures import ThreadPoolExecutor
import hashlib
import time

from lamp_ros.artifact.manifest import hash_threads
from lamp_ros.graph.graph import OpGraph


def export_module(module, args) -> tuple:
    """torch.export the module on example args -> (ExportedProgram, OpGraph, seconds)."""
    import torch
    start = time.perf_counter()
    example = tuple(a.clone() for a in args)  # inference-mode tensors cannot be exported
    program = torch.export.export(module, example, strict=False)
    return program, op_graph(program), time.perf_counter() - start


def op_graph(program) -> OpGraph:
    """One entry per call_function node, with dtype and shape from the FakeTensor meta."""
    ops, inputs, outputs = [], [], []
    for node in program.graph.nodes:
        if node.op == 'placeholder':
            inputs.append(node.name)
        elif node.op == 'output':
            outputs.extend(a.name for a in node.all_input_nodes)
        elif node.op == 'call_function' and not _is_check(node.target):
            val = node.meta.get('val')
            first = val[0] if isinstance(val, (list, tuple)) and val else val
            ops.append({
                'name': node.name,
                'target': _target_name(node.target),
                'inputs': [a.name for a in node.all_input_nodes],
                'dtype': str(getattr(first, 'dtype', '')).removeprefix('torch.'),
                'shape': [int(d) for d in getattr(first, 'shape', ())],
            })
    return OpGraph(ops=tuple(ops), inputs=tuple(inputs), outputs=tuple(outputs))


def _is_check(target) -> bool:
    """Export's runtime shape/dtype assertions: bookkeeping, not computation."""
    return _target_name(target).startswith(('aten._assert', 'aten.sym_constrain'))


def _target_name(target) -> str:
    """`aten.add.Tensor`, `lamp.letterbox.default`: an operator's namespace, name, overload."""
    name = getattr(target, '__name__', str(target))
    overload = getattr(target, '_overloadpacket', None)
    if overload is not None:
        namespace = getattr(target, 'namespace', 'aten')
        return name if name.startswith(f'{namespace}.') else f'{namespace}.{name}'
    return name


def weight_hashes(module) -> dict:
    """name -> {shape, dtype, sha256} for every parameter and buffer the module owns.

    The tensors are copied off their device and hashed on a few threads (the copies and hashlib
    release the GIL): the full policy's stages hold 6 GB, several seconds on one core."""
    with ThreadPoolExecutor(max_workers=hash_threads()) as pool:
        return dict(pool.map(_tensor_entry, sorted(module.state_dict().items())))


def _tensor_entry(item) -> tuple:
    import torch
    name, tensor = item
    data = tensor.detach().contiguous().cpu()
    raw = data.view(-1).view(dtype=torch.uint8).numpy() if data.numel() else b''
    return name, {'shape': list(data.shape), 'dtype': str(data.dtype).removeprefix('torch.'),
                  'sha256': hashlib.sha256(raw).hexdigest()}
