"""The compiler's side of the passes: stage modules from the graph, results back into it.

A node a pass changed carries `attrs['passes']` (the pass names, so its content hash changes
and `lamp diff` shows it), `meta['passes']` ([{name, details}]), the hashes of its optimised
weights and, when asked, an op-level subgraph exported from the optimised module (the trace
exported the eager one; exporting once, after the passes, costs what the trace would have).
"""

from dataclasses import replace
import operator

from lamp_ros.graph.graph import Graph


def stage_modules(graph: Graph, owner) -> dict:
    """node id -> nn.Module of every model stage (`attrs['module']` is a path on `owner`)."""
    return {n.id: operator.attrgetter(n.attrs['module'])(owner)
            for n in graph.nodes if n.kind == 'model'}


def _as_tensor(value, device):
    import numpy as np
    import torch
    if isinstance(value, torch.Tensor):
        return value
    return torch.as_tensor(np.asarray(value), device=device)


def record_passes(graph: Graph, modules: dict, results: dict, example: dict | None = None,
                  progress=None) -> Graph:
    """The graph with the passes' results on its model nodes (linted).

    example: value name -> example value; given, every model node gets a fresh subgraph
    exported from its (optimised) module on those inputs. A node's weights are hashed when a
    pass changed its module or the trace left them unhashed.
    """
    from lamp_ros.trace.export import export_module, weight_hashes
    from lamp_ros.trace.stage import module_device

    nodes = []
    for node in graph.nodes:
        if node.kind != 'model':
            nodes.append(node)
            continue
        module = modules[node.id]
        applied = [(name, r.details[node.id]) for name, r in results.items()
                   if node.id in r.details]
        if applied:
            node = replace(node, attrs={**node.attrs, 'passes': [n for n, _ in applied]},
                           meta={**node.meta, 'passes': [{'name': n, 'details': d}
                                                         for n, d in applied]})
        if applied or not node.weights:
            node = replace(node, weights=weight_hashes(module))
        if example is not None:
            if progress:
                progress(f'torch.export {node.id}')
            device = module_device(module)
            args = [_as_tensor(example[v], device) for v in node.inputs]
            _, sub, _ = export_module(module, args)
            node = replace(node, subgraph=sub, meta={**node.meta, 'op_counts': sub.op_counts})
        nodes.append(node)
    return replace(graph, nodes=tuple(nodes)).lint()
