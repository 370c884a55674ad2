"""`lamp diff A B --layers`: where two artifacts of one graph part ways, layer by layer.

Both artifacts run the same observations (A's stored parity samples, or a folder of `.npz`
observations). Every ONNX Runtime group the two share is then run again, both versions on the
inputs A's group received, with each layer's input and output as extra outputs. A layer is a
weight that MatMuls read (backends/onnx_int8.py `candidates`; the expert's ten Euler steps are
one layer), found in each artifact by its MatMul nodes' names, which lowering keeps. Per layer:
- its output's error, B against A: max |B - A| / max |A| and the cosine, over all observations
  and all its MatMuls. This carries the error of every layer before it;
- the error it **adds**: B's layer alone (its MatMul with what feeds it, its quantize and
  dequantize steps included, cut out of B's graph) run on the very input A's layer received,
  against A's output. A layer B computes as A does adds nothing, whatever it receives;
- where B is a precision plan's artifact (evidence/precision.json), the error that layer caused
  in the actions when B's build lowered it alone.
Layers are listed by the error they add, largest first, and the first layer in graph order
whose output error passes `threshold` is named. The actions of the two are compared too. The
picture puts every layer in graph order: output error, added error, the threshold.

Layers inside other backends' groups (cuda, TensorRT) are not reached yet: their programs have
no such probes.
"""

import json
import os
import sys

import numpy as np

from lamp_ros.artifact.load import open_artifact
from lamp_ros.backends.onnx_int8 import candidates, named_nodes
from lamp_ros.backends.onnxrt import model_with_weights, OrtRunner
from lamp_ros.progress import progress_lines
from lamp_ros.runtime import Runtime
from lamp_ros.whitebox.inspect import read_evidence
from lamp_ros.whitebox.verify import stored_observations

THRESHOLD = 1e-2


class LayerDiffError(ValueError):
    """The two artifacts cannot be compared layer by layer; says why."""


def _same_graph(a, b) -> None:
    ops_a = [(n.id, n.op) for n in a.graph.nodes]
    ops_b = [(n.id, n.op) for n in b.graph.nodes]
    if ops_a != ops_b:
        first = next((x, y) for x, y in zip(ops_a + [None], ops_b + [None]) if x != y)
        raise LayerDiffError(f'the artifacts are not of one graph: node {first[0]} in A, '
                             f'{first[1]} in B')


def _node_values(model) -> dict:
    """MatMul node name -> (the float value it multiplies, its output): behind an int8
    MatMul's quantize-dequantize pair, the float value both artifacts compute."""
    producer = {out: n for n in model.graph.node for out in n.output}
    out = {}
    for node in model.graph.node:
        if node.op_type != 'MatMul':
            continue
        x = node.input[0]
        dq = producer.get(x)
        q = producer.get(dq.input[0]) if dq is not None and \
            dq.op_type == 'DequantizeLinear' else None
        if q is not None and q.op_type == 'QuantizeLinear':
            x = q.input[0]
        out[node.name] = (x, node.output[0])
    return out


def _layer_model(model, node_name: str, start: str, dtype) -> bytes:
    """The part of `model` that computes MatMul `node_name` from value `start`: the MatMul
    and the nodes that feed it, back to `start` and the initializers."""
    from onnx import helper
    producer = {out: n for n in model.graph.node for out in n.output}
    initializers = {i.name: i for i in model.graph.initializer}
    node = next(n for n in model.graph.node if n.name == node_name)
    keep, todo = set(), [node]
    while todo:
        current = todo.pop()
        if current.name in keep:
            continue
        keep.add(current.name)
        for value in current.input:
            if value in ('', start) or value in initializers:
                continue
            if value not in producer:
                raise LayerDiffError(f'MatMul {node_name} also reads {value}, which its input '
                                     f'{start} does not determine')
            todo.append(producer[value])
    nodes = [n for n in model.graph.node if n.name in keep]
    read = {v for n in nodes for v in n.input}
    graph = helper.make_graph(
        nodes, 'layer', [helper.make_tensor_value_info(
            start, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), None)],
        [helper.make_empty_tensor_value_info(node.output[0])],
        [i for name, i in initializers.items() if name in read])
    layer = helper.make_model(graph, opset_imports=model.opset_import)
    layer.ir_version = model.ir_version
    return layer.SerializeToString()


def _error(a: list, b: list) -> dict:
    a = np.concatenate([np.ravel(x).astype(np.float64) for x in a])
    b = np.concatenate([np.ravel(x).astype(np.float64) for x in b])
    scale = float(np.abs(a).max()) or 1.0
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    return {'max_rel': float(np.abs(b - a).max()) / scale,
            'cosine': float(a @ b / norm) if norm > 0 else float(np.array_equal(a, b))}


def _observations(a_root: str, folder: str | None, samples: int) -> list:
    if folder:
        from lamp_ros.compiler.precision_plan import read_npz_observation
        files = sorted(f for f in os.listdir(folder) if f.endswith('.npz'))[:samples]
        if not files:
            raise LayerDiffError(f'{folder}: no .npz observation')
        return [{'obs': read_npz_observation(os.path.join(folder, f)), 'committed': None,
                 'delay': None, 'end': None, 't': 0.0} for f in files]
    stored, problems = stored_observations(a_root)
    if not stored:
        raise LayerDiffError(f'A has no stored parity observations ({"; ".join(problems)}); '
                             'give --observations')
    return stored[:samples]


def layer_diff(a_path: str, b_path: str, observations: str | None = None, samples: int = 4,
               threshold: float = THRESHOLD, progress=None) -> dict:
    """The report (plain data): per shared ONNX Runtime group, every layer's errors.
    `progress(message)`: told each step (the artifacts' runs, each group's layers)."""
    say = progress or (lambda message: None)
    a, b = open_artifact(a_path), open_artifact(b_path)
    _same_graph(a, b)
    groups = [(ga, gb) for ga, gb in zip(a.plan.groups, b.plan.groups)
              if ga.backend == gb.backend == 'onnxruntime' and ga.nodes == gb.nodes]
    if not groups:
        raise LayerDiffError('no ONNX Runtime group in both artifacts: layers are reached '
                             'inside ONNX Runtime groups only')
    samples_ = _observations(a.root, observations, samples)
    runtimes = {k: Runtime.load(p) for k, p in (('a', a.root), ('b', b.root))}
    feeds = {g.name: [] for g, _ in groups}
    actions = {'a': [], 'b': []}
    try:
        for i, sample in enumerate(samples_):
            say(f'observation {i + 1}/{len(samples_)} through A and B')
            for key, runtime in runtimes.items():
                runtime.reset()
                values = {}
                out = runtime.run(runtime.feeds(sample['obs'], sample['t'],
                                                committed=sample['committed'],
                                                delay=sample['delay'], end=sample['end']),
                                  capture=values)
                chunk = values.get(runtime.chunk_value) if runtime.chunk_value else None
                actions[key].append(np.concatenate([np.ravel(v) for v in out.values()])
                                    if chunk is None else chunk)
                if key == 'a':
                    for g, _ in groups:
                        feeds[g.name].append({v: values[v] for v in g.inputs})
    finally:
        for runtime in runtimes.values():
            runtime.close()
    plan = read_evidence(b.root, 'evidence/precision.json') or {}
    report = {'a': a.id, 'b': b.id, 'observations': len(samples_), 'threshold': threshold,
              'actions': _error(actions['a'], actions['b']), 'groups': {}}
    for ga, gb in groups:
        import onnxruntime as ort
        models = {'a': named_nodes(model_with_weights(ga, a.root)),
                  'b': named_nodes(model_with_weights(gb, b.root))}
        layers = max(({n: c.nodes for n, c in candidates(m).items()} for m in models.values()),
                     key=len)
        values = {k: _node_values(m) for k, m in models.items()}
        found = {name: nodes for name, nodes in layers.items()
                 if all(n in values['a'] and n in values['b'] for n in nodes)}
        say(f'{ga.name}: {len(found)} layers, each probed and cut out')
        got = {}
        for key, group, root in (('a', ga, a.root), ('b', gb, b.root)):
            probes = tuple(sorted({v for nodes in found.values() for n in nodes
                                   for v in values[key][n]}))
            runner = OrtRunner(group, root, 'cpu', probes=probes)
            got[key] = [runner.run_probes(f) for f in feeds[ga.name]]
        alone = ((plan.get('groups') or {}).get(gb.name) or {}).get('layers', {})
        disabled = gb.build.get('disabled_optimizers') or []
        rows = {}
        for order, (name, nodes) in enumerate(found.items()):
            errors = {}
            for side, index in (('input', 0), ('output', 1)):
                errors[side] = _error(
                    [r[values['a'][n][index]] for r in got['a'] for n in nodes],
                    [r[values['b'][n][index]] for r in got['b'] for n in nodes])
            own_a, own_b = [], []
            for n in nodes:
                (a_in, a_out), (b_in, b_out) = values['a'][n], values['b'][n]
                session = ort.InferenceSession(
                    _layer_model(models['b'], n, b_in, got['a'][0][a_in].dtype),
                    providers=['CPUExecutionProvider'], disabled_optimizers=disabled)
                for r in got['a']:
                    own_a.append(r[a_out])
                    own_b.append(session.run([b_out], {b_in: r[a_in]})[0])
            rows[name] = {'order': order, **errors, 'added': _error(own_a, own_b),
                          **({'alone_in_actions': {k: alone[name][k] for k in
                                                   ('cosine', 'max_rel')}}
                             if name in alone else {})}
        missing = sorted(set(layers) - set(found))
        first = next((n for n, r in rows.items() if r['output']['max_rel'] > threshold), None)
        report['groups'][ga.name] = {
            'layers': rows, 'not_found': missing, 'first_divergent': first,
            'by_added_error': sorted(rows, key=lambda n: -rows[n]['added']['max_rel'])}
    return report


def _row(layer: str, row: dict, first: bool) -> str:
    alone = row.get('alone_in_actions')
    alone = f'{alone["max_rel"]:.2e}' if alone else '-'
    return (f'  {layer:44s} {row["added"]["max_rel"]:9.2e} {row["output"]["max_rel"]:9.2e} '
            f'{row["output"]["cosine"]:10.6f} {alone:>19s}'
            + ('  <- first past the threshold' if first else ''))


def format_layers(report: dict, top: int = 15) -> str:
    """The `top` layers by the error they add, and the first layer past the threshold, which
    the header names, wherever it ranks (after a `...` line when below the top)."""
    lines = [f'layers of A {report["a"][:12]} vs B {report["b"][:12]} on '
             f'{report["observations"]} observations; actions: max rel '
             f'{report["actions"]["max_rel"]:.3g}, cosine {report["actions"]["cosine"]:.6f}']
    for name, group in report['groups'].items():
        first = group['first_divergent']
        lines.append(f'{name}: first layer past max rel {report["threshold"]:g}: '
                     f'{first or "none"}')
        lines.append(f'  {"layer (by error added)":44s} {"added":>9s} {"out rel":>9s} '
                     f'{"out cos":>10s} {"alone: actions rel":>19s}')
        shown = group['by_added_error'][:top]
        for layer in shown:
            lines.append(_row(layer, group['layers'][layer], layer == first))
        if first and first not in shown:
            between = group['by_added_error'].index(first) - len(shown)
            lines += [f'  ... ({between} layers between)'] if between else []
            lines.append(_row(first, group['layers'][first], True))
        if group['not_found']:
            lines.append(f'  not found in both: {", ".join(group["not_found"])}')
    return '\n'.join(lines)


def render_layers(report: dict, path: str) -> None:
    """Every layer in graph order: its output's error and the error it adds, the threshold."""
    from matplotlib.figure import Figure  # imported here: only pictures need matplotlib
    groups = report['groups']
    fig = Figure(figsize=(11, 4.5 * len(groups)))
    for ax, (name, group) in zip(fig.subplots(len(groups), 1, squeeze=False)[:, 0],
                                 groups.items()):
        names = sorted(group['layers'], key=lambda n: group['layers'][n]['order'])
        x = np.arange(len(names))
        floor = 1e-8  # no error at all sits on the axis
        out = [max(group['layers'][n]['output']['max_rel'], floor) for n in names]
        added = [max(group['layers'][n]['added']['max_rel'], floor) for n in names]
        ax.bar(x - 0.2, out, 0.4, label='output error (max rel)')
        ax.bar(x + 0.2, added, 0.4, label='error added by the layer')
        ax.axhline(report['threshold'], color='gray', linestyle='--', label='threshold')
        ax.set_yscale('log')
        ax.set_ylim(bottom=floor)
        ax.set_xticks(x, names, rotation=80, fontsize=6)
        ax.set_title(f'{name}: B {report["b"][:12]} against A {report["a"][:12]}; first past '
                     f'the threshold: {group["first_divergent"] or "none"}')
        ax.legend(loc='upper left', fontsize=7)
    fig.tight_layout()
    fig.savefig(path)


def run_layer_diff(a: str, b: str, as_json: bool = False, png: str | None = None,
                   observations: str | None = None, samples: int = 4,
                   threshold: float = THRESHOLD) -> int:
    with progress_lines('layers') as say:
        report = layer_diff(a, b, observations, samples, threshold, progress=say)
    print(json.dumps(report, indent=1) if as_json else format_layers(report))
    if png:
        folder = os.path.dirname(os.path.abspath(png))
        os.makedirs(folder, exist_ok=True)
        render_layers(report, png)
        # where the picture went; on stderr beside --json, whose stdout is the report alone
        print(f'wrote {png} (every layer\'s errors in graph order)',
              file=sys.stderr if as_json else sys.stdout)
    return 0
