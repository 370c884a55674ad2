"""The dynamic tracer: one run of the pipeline, recorded stage by stage.

The tracer wraps the marked methods (`@stage`, `model_stage`) of the objects it is given, runs the
pipeline once on an example observation, and follows every value by identity: an array that a
stage returns and another stage receives is an edge. Values that enter a stage without coming
from a graph input or another stage are the one thing it cannot follow; it stops with the stage,
the call site and what to change. Scalars and strings of unknown origin are constants: they are
recorded as the node's `args` attribute. Model stages are then exported with torch.export on
the tensors they actually received, giving each an op-level subgraph.
"""

import inspect
import os
import sys

from lamp_ros.graph.graph import Graph, Node
from lamp_ros.graph.types import TensorType
from lamp_ros.trace.values import flatten, is_tensor, type_of

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class TraceError(ValueError):
    """The pipeline did something the tracer cannot turn into a graph."""


def _relpath(path: str) -> str:
    path = os.path.abspath(path)
    return os.path.relpath(path, PACKAGE_ROOT) if path.startswith(PACKAGE_ROOT) else \
        os.path.basename(path)


def _where(fn) -> str:
    fn = inspect.unwrap(fn)
    try:
        return f'{_relpath(inspect.getsourcefile(fn))}:{inspect.getsourcelines(fn)[1]}'
    except (OSError, TypeError):
        return getattr(fn, '__qualname__', '?')


class _Recorder:
    """Mutable bookkeeping of one trace run (lives only inside `trace`)."""

    def __init__(self):
        self.nodes, self.values, self.calls = [], {}, []
        self.producer = {}   # id(value) -> value name
        self.keep = []       # keep traced objects alive so ids stay unique
        self.index = {}      # value name -> position in keep

    def register(self, name: str, value, vtype: TensorType):
        self.values[name] = vtype
        self.producer[id(value)] = name
        self.index[name] = len(self.keep)
        self.keep.append(value)

    def name_of(self, value):
        return self.producer.get(id(value))


def _wrap(rec: _Recorder, obj, fn, spec):
    signature = inspect.signature(fn)

    def traced(*args, **kwargs):
        caller = sys._getframe(1)
        call_site = f'{_relpath(caller.f_code.co_filename)}:{caller.f_lineno}'
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        node_id = spec.op if not spec.key else f'{spec.op}.{bound.arguments[spec.key]}'
        if any(n.id == node_id for n in rec.nodes):
            raise TraceError(f'stage {spec.op} ({call_site}): called twice in one trace as '
                             f'{node_id!r}; give the stage key=<argument> that tells calls apart')
        inputs, ports, consts = [], [], {}
        for pname, value in bound.arguments.items():
            for path, leaf in flatten(pname, value):
                known = rec.name_of(leaf)
                if known:
                    inputs.append(known)
                    ports.append(path)
                elif is_tensor(leaf):
                    raise TraceError(
                        f'stage {spec.op} ({call_site}): argument {path!r} ({type_of(leaf)}) '
                        'was not produced by a graph input or another stage; compute it inside '
                        'a @stage method, or pass the stage output on unchanged')
                else:
                    consts[path] = leaf
        result = fn(*args, **kwargs)
        outs = result if len(spec.outputs) > 1 else (result,)
        if len(outs) != len(spec.outputs):
            raise TraceError(f'stage {spec.op} ({call_site}): returned {len(outs)} values, '
                             f'declared outputs {spec.outputs}')
        out_names = []
        for port, value in zip(spec.outputs, outs):
            for path, leaf in flatten(f'{node_id}.{port}', value):
                try:
                    rec.register(path, leaf, type_of(leaf))
                except TypeError as exc:
                    raise TraceError(f'stage {spec.op} ({call_site}): output {path!r}: '
                                     f'{exc}') from exc
                out_names.append(path)
        state_names = []
        if spec.state:
            for key, arr in sorted(obj.state[spec.state].items()):
                name = f'{node_id}.state.{key}'
                rec.values[name] = type_of(arr, role='state', lifetime='episode')
                state_names.append(name)
        attrs = dict(spec.attrs(obj)) if spec.attrs else {}
        if consts:
            attrs['args'] = {k: v for k, v in consts.items() if k != spec.key}
            attrs = attrs if attrs['args'] else {k: v for k, v in attrs.items() if k != 'args'}
        if spec.key:
            attrs[spec.key] = bound.arguments[spec.key]
        rec.nodes.append(Node(id=node_id, op=spec.op, kind=spec.kind, inputs=tuple(inputs),
                              ports=tuple(ports), outputs=tuple(out_names),
                              state=tuple(state_names), attrs=attrs, source=_where(fn),
                              meta={'call_site': call_site}))
        if spec.module:
            rec.calls.append((node_id, obj, spec, list(bound.args)))
        return result

    traced.__wrapped__ = fn
    return traced


def _marked_methods(obj):
    for name in dir(type(obj)):
        fn = getattr(type(obj), name, None)
        spec = getattr(fn, '__lamp_stage__', None)
        if spec is not None:
            yield name, getattr(obj, name), spec


def trace(run, inputs: dict, objects, input_types: dict | None = None, export: bool = True,
          name: str = '', progress=None, values_out: dict | None = None,
          hash_weights: bool = True) -> Graph:
    """Trace `run(**inputs)` over the stages of `objects` into a linted Graph.

    inputs: graph input name -> value (dicts are flattened: images -> images.base, ...).
    input_types: optional declared types for inputs (e.g. symbolic image sizes).
    export: give model stages an op-level subgraph with torch.export.
    values_out: if given, filled with value name -> the value seen in this run (parity
    references at every edge).
    hash_weights: give model stages the sha256 of their weights. Off where the graph is thrown
    away (parity's eager references) or the weights are hashed again after the passes: for the
    full policy that is 6 GB copied off the GPU and hashed, seconds a trace.
    """
    rec = _Recorder()
    graph_inputs = []
    for in_name, value in inputs.items():
        for path, leaf in flatten(in_name, value):
            declared = (input_types or {}).get(path)
            vtype = declared or type_of(leaf, role='input')
            rec.register(path, leaf, vtype)
            graph_inputs.append(path)
    patched = []
    try:
        for obj in objects:
            for attr, method, spec in _marked_methods(obj):
                setattr(obj, attr, _wrap(rec, obj, method, spec))
                patched.append((obj, attr))
        result = run(**inputs)
    finally:
        for obj, attr in patched:
            delattr(obj, attr)
    outputs = []
    for path, leaf in flatten('out', result):
        known = rec.name_of(leaf)
        if not known:
            raise TraceError(f'trace: result {path!r} was not produced by a stage; return a '
                             'stage output unchanged')
        outputs.append(known)
    if values_out is not None:
        values_out.update({name: rec.keep[i] for name, i in rec.index.items()})
    nodes = _finish_model_stages(rec, export, progress, hash_weights)
    values = dict(rec.values)
    for v in outputs:
        values[v] = _with_role(values[v], 'output')
    return Graph(nodes=tuple(nodes), values=values, inputs=tuple(graph_inputs),
                 outputs=tuple(outputs), name=name).lint()


def _with_role(vtype: TensorType, role: str) -> TensorType:
    return TensorType(**{**vtype.to_dict(), 'shape': vtype.shape, 'role': role})


def _finish_model_stages(rec: _Recorder, export: bool, progress, hash_weights: bool) -> list:
    """Model stages own their weights (hashed unless told not to) and, with export, an op
    subgraph."""
    from dataclasses import replace
    import operator

    import torch

    from lamp_ros.trace.export import export_module, weight_hashes
    from lamp_ros.trace.stage import module_device
    nodes = {n.id: n for n in rec.nodes}
    for node_id, obj, spec, args in rec.calls:
        module = operator.attrgetter(spec.module)(obj)
        device = module_device(module)
        tensors = [a if isinstance(a, torch.Tensor) else torch.as_tensor(a, device=device)
                   for a in args]
        node = replace(nodes[node_id], weights=weight_hashes(module) if hash_weights else {},
                       attrs={**nodes[node_id].attrs, 'module': spec.module})
        nodes[node_id] = node
        if not export:
            continue
        if progress:
            progress(f'torch.export {node_id}')
        try:
            _, sub, _ = export_module(module, tensors)
        except Exception as exc:
            raise TraceError(f'stage {node_id} ({nodes[node_id].source}): torch.export failed: '
                             f'{type(exc).__name__}: {str(exc)[:500]}; make the module\'s '
                             'forward export-friendly (no data-dependent Python control flow)'
                             ) from exc
        meta = {**node.meta, 'op_counts': sub.op_counts}
        nodes[node_id] = replace(node, subgraph=sub, meta=meta)
    return [nodes[n.id] for n in rec.nodes]
