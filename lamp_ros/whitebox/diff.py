"""`lamp diff A B`: what differs between two artifacts, cause by cause.

Causes (what was built differently) cover everything the artifact id is made of, so two
artifacts with different ids always have a cause named: the manifest's own fields (name,
schema, target), the ABI (cameras, joints, prompt, rate, types), an imported checkpoint, the
spec as the build read it (spec.json), graph nodes (by node id, "changed" when the content hash
differs, with the differing attrs, types and weights spelled out) and the rest of graph.json,
weight tensors, the build plan (backend, precision, device, grouping, tuned tiles, every key of
a group's build entry; plan_diff.py), the precision plans (which layers a measured plan lowered
to int8 or FP8), the memory plan, the tool versions, and, last, every file of the id whose
difference none of those names (`other_files`: a resource, a group's compiled program).
Effects (what was measured): parity evidence and saved profiles, with the largest latency
increase named, and every other evidence file that differs (build timings, how tuned choices
were made), which is not part of the artifact id. Every category is empty when nothing in it
changed, so "A vs A", or one spec built twice, is a report of empty causes.
"""

import json
import os

import numpy as np

from lamp_ros.artifact.load import open_artifact
from lamp_ros.artifact.manifest import content_digest, read_provenance
from lamp_ros.whitebox.inspect import PARITY, PROFILE, read_evidence
from lamp_ros.whitebox.json_diff import deep_diff, leaves
from lamp_ros.whitebox.plan_diff import diff_plan, diff_precision_plans

CAUSES = ('manifest', 'abi', 'checkpoint', 'spec', 'nodes_changed', 'nodes_added',
          'nodes_removed', 'graph', 'weights_changed', 'plan_changed', 'precision_plan',
          'memory', 'created_by', 'other_files')
SPEC = 'spec.json'
# which causes speak for a file of the id; a differing file none of them names is listed in
# `other_files` (weights/ files: their node's tensors; groups/: see _named)
FILE_CAUSES = {'graph.json': ('nodes_changed', 'nodes_added', 'nodes_removed', 'graph'),
               'plan.json': ('plan_changed', 'precision_plan'), 'memory.json': ('memory',),
               SPEC: ('spec',), 'provenance.json': ('checkpoint',)}
# a group's compiled program is made from its nodes, their weights, the plan and the tools
PROGRAM_CAUSES = ('nodes_changed', 'nodes_added', 'nodes_removed', 'weights_changed',
                  'plan_changed', 'precision_plan', 'created_by')


def _read_json(root: str, rel: str):
    path = os.path.join(root, rel)
    if not os.path.isfile(path):
        return None
    with open(path, encoding='utf-8') as f:
        return json.load(f)


# ---- graph -----------------------------------------------------------------------------------

def _types(graph, node, field: str) -> dict:
    names = getattr(node, field)
    ports = node.ports if field == 'inputs' else names
    return {port: graph.values[v].to_dict() for port, v in zip(ports, names)}


def node_change(ga, gb, na, nb) -> dict:
    """Why two nodes with one id hash differently: op, kind, ports, attrs, types, weights."""
    change = {'hash': [na.content_hash(ga.values), nb.content_hash(gb.values)]}
    for field in ('op', 'kind', 'ports'):
        if getattr(na, field) != getattr(nb, field):
            change[field] = [getattr(na, field), getattr(nb, field)]
    change['attrs'] = deep_diff(na.attrs, nb.attrs)
    for field in ('inputs', 'outputs', 'state'):
        change[field] = deep_diff(_types(ga, na, field), _types(gb, nb, field))
    wa, wb = na.weights, nb.weights
    change['weights'] = sorted(k for k in set(wa) | set(wb)
                               if (wa.get(k) or {}).get('sha256') != (wb.get(k) or {})
                               .get('sha256'))
    return change


def diff_graph(ga, gb) -> dict:
    ids_a, ids_b = [n.id for n in ga.nodes], [n.id for n in gb.nodes]
    changed = {}
    for nb in gb.nodes:
        if nb.id in ids_a:
            na = ga.node(nb.id)
            if na.content_hash(ga.values) != nb.content_hash(gb.values):
                changed[nb.id] = node_change(ga, gb, na, nb)
    return {'nodes_changed': changed,
            'nodes_added': [n for n in ids_b if n not in ids_a],
            'nodes_removed': [n for n in ids_a if n not in ids_b]}


def graph_rest(ja: dict | None, jb: dict | None, named) -> list:
    """Dotted paths (four keys deep) of whatever else differs in two graph.json files: the
    graph's name, inputs, outputs, values, edges and node order, and the fields of the nodes
    not `named` already (changed, added or removed) that their content hash leaves out (source,
    meta, subgraph, value names)."""
    def body(graph):
        graph = dict(graph or {})
        nodes = graph.pop('nodes', [])
        return {**graph, 'node_order': [n['id'] for n in nodes],
                'nodes': {n['id']: {k: v for k, v in n.items() if k != 'id'}
                          for n in nodes if n['id'] not in named}}
    return leaves(deep_diff(body(ja), body(jb)), depth=4)


# ---- weights ---------------------------------------------------------------------------------

def _weight_files(manifest: dict) -> dict:
    return {rel: content_digest(e) for rel, e in manifest['files'].items()
            if rel.startswith('weights/') and rel.endswith('.safetensors')}


def diff_weights(a, b) -> list:
    """[{node, tensor, shape, max_abs_delta}] for every tensor whose bytes differ."""
    from safetensors.numpy import load_file
    files_a, files_b = _weight_files(a.manifest), _weight_files(b.manifest)
    out = []
    for rel in sorted(set(files_a) | set(files_b)):
        if files_a.get(rel) == files_b.get(rel):
            continue
        node = os.path.basename(rel).removesuffix('.safetensors')
        ta = load_file(os.path.join(a.root, rel)) if rel in files_a else {}
        tb = load_file(os.path.join(b.root, rel)) if rel in files_b else {}
        for name in sorted(set(ta) | set(tb)):
            x, y = ta.get(name), tb.get(name)
            entry = {'node': node, 'tensor': name}
            if x is None or y is None:
                entry.update(change='added' if x is None else 'removed',
                             shape=list((y if x is None else x).shape), max_abs_delta=None)
            elif x.shape != y.shape or x.dtype != y.dtype:
                entry.update(change='shape', shape=[list(x.shape), list(y.shape)],
                             dtype=[str(x.dtype), str(y.dtype)], max_abs_delta=None)
            elif x.tobytes() == y.tobytes():
                continue
            else:
                delta = np.abs(x.astype(np.float64) - y.astype(np.float64))
                entry.update(change='values', shape=list(x.shape),
                             max_abs_delta=float(delta.max()) if delta.size else 0.0)
            out.append(entry)
    return out


# ---- memory ----------------------------------------------------------------------------------

def _buffers(memory: dict) -> dict:
    return {b['name']: {'arena': a['device'], **{k: v for k, v in b.items() if k != 'name'}}
            for a in memory['arenas'] for b in a['buffers']}


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def diff_memory(ma: dict, mb: dict) -> dict:
    """The summary's changes with their deltas, each arena's changed fields, every buffer
    whose size, offset, lifetime or arena moved, and any other key of memory.json."""
    out = {}
    sa, sb = ma.get('summary', {}), mb.get('summary', {})
    summary = {k: {'a': sa.get(k), 'b': sb.get(k),
                   'delta': sb[k] - sa[k] if _number(sa.get(k)) and _number(sb.get(k))
                   else None}
               for k in sorted(set(sa) | set(sb)) if sa.get(k) != sb.get(k)}
    arenas = deep_diff(
        {a['device']: {k: v for k, v in a.items() if k not in ('device', 'buffers')}
         for a in ma['arenas']},
        {a['device']: {k: v for k, v in a.items() if k not in ('device', 'buffers')}
         for a in mb['arenas']})
    ba, bb = _buffers(ma), _buffers(mb)
    buffers = {name: deep_diff(ba.get(name) or {}, bb.get(name) or {})
               for name in sorted(set(ba) | set(bb)) if ba.get(name) != bb.get(name)}
    rest = deep_diff({k: v for k, v in ma.items() if k not in ('summary', 'arenas')},
                     {k: v for k, v in mb.items() if k not in ('summary', 'arenas')})
    for key, value in (('summary', summary), ('arenas', arenas), ('buffers', buffers),
                       ('other', rest)):
        if value:
            out[key] = value
    return out


# ---- evidence and profile --------------------------------------------------------------------

def diff_evidence(ra: str, rb: str) -> dict:
    """Parity deltas per compared value (max abs / max rel error, pass flag)."""
    pa, pb = read_evidence(ra, PARITY), read_evidence(rb, PARITY)
    if not pa or not pb:
        return {} if pa == pb else {'parity': ['present' if pa else None,
                                               'present' if pb else None]}
    values = {}
    for name in sorted(set(pa['worst']) | set(pb['worst'])):
        x, y = pa['worst'].get(name, {}), pb['worst'].get(name, {})
        if x == y:
            continue
        values[name] = {k: {'a': x.get(k), 'b': y.get(k),
                            'delta': None if not isinstance(x.get(k), float) or not
                            isinstance(y.get(k), float) else y[k] - x[k]}
                        for k in ('max_abs', 'max_rel', 'passed') if x.get(k) != y.get(k)}
    out = {}
    if pa['passed'] != pb['passed']:
        out['passed'] = [pa['passed'], pb['passed']]
    if pa['tolerance'] != pb['tolerance']:
        out['tolerance'] = [pa['tolerance'], pb['tolerance']]
    if values:
        out['parity'] = values
    return out


def _p50(stats) -> float | None:
    return stats['p50_ms'] if stats else None


def diff_profile(ra: str, rb: str) -> dict:
    """p50 deltas per group and node of two saved profiles, and the largest increase."""
    pa, pb = read_evidence(ra, PROFILE), read_evidence(rb, PROFILE)
    if not pa or not pb:
        return {'available': [pa is not None, pb is not None]} if pa or pb else {}
    out = {}
    for key in ('tick', 'inference'):
        if _p50(pa.get(key)) is not None and _p50(pb.get(key)) is not None:
            out[key] = {'a': _p50(pa[key]), 'b': _p50(pb[key]),
                        'delta_ms': _p50(pb[key]) - _p50(pa[key])}
    candidates = []
    for section in ('groups', 'nodes'):
        rows = {}
        for name in sorted(set(pa.get(section, {})) | set(pb.get(section, {}))):
            x, y = _p50(pa[section].get(name)), _p50(pb[section].get(name))
            rows[name] = {'a': x, 'b': y,
                          'delta_ms': None if x is None or y is None else y - x}
            if rows[name]['delta_ms'] is not None:
                candidates.append((rows[name]['delta_ms'], section[:-1], name))
        out[section] = rows
    ops_a = {o['op_type']: o['ms'] for o in pa.get('top_ops', [])}
    ops_b = {o['op_type']: o['ms'] for o in pb.get('top_ops', [])}
    out['ops'] = {op: {'a': ops_a.get(op), 'b': ops_b.get(op),
                       'delta_ms': (ops_b.get(op) or 0.0) - (ops_a.get(op) or 0.0)}
                  for op in sorted(set(ops_a) | set(ops_b))}
    if candidates:
        delta, kind, name = max(candidates)
        out['top_hot_spot'] = {'kind': kind, 'name': name, 'delta_ms': delta}
    return out


def diff_evidence_files(ma: dict, mb: dict, ra: str, rb: str) -> dict:
    """{path: what differs} for each evidence file (manifest `volatile`: measured by the build
    or a run, not part of the id) whose content differs: the differing keys of a JSON file,
    else 'added', 'removed' or 'changed'."""
    va = {k: content_digest(v) for k, v in ma.get('volatile', {}).items()}
    vb = {k: content_digest(v) for k, v in mb.get('volatile', {}).items()}
    out = {}
    for rel in sorted(set(va) | set(vb)):
        if va.get(rel) == vb.get(rel):
            continue
        if rel not in va or rel not in vb:
            out[rel] = 'added' if rel not in va else 'removed'
        elif rel.endswith('.json'):
            with open(os.path.join(ra, rel), encoding='utf-8') as fa, \
                    open(os.path.join(rb, rel), encoding='utf-8') as fb:
                out[rel] = leaves(deep_diff(json.load(fa), json.load(fb)))
        else:
            out[rel] = 'changed'
    return out


# ---- the whole diff --------------------------------------------------------------------------

def _files(ma: dict, mb: dict) -> dict:
    fa = {k: content_digest(v) for k, v in ma['files'].items()}
    fb = {k: content_digest(v) for k, v in mb['files'].items()}
    out = {'added': sorted(set(fb) - set(fa)), 'removed': sorted(set(fa) - set(fb)),
           'changed': sorted(k for k in set(fa) & set(fb) if fa[k] != fb[k])}
    return {k: v for k, v in out.items() if v}


def _named(rel: str, report: dict) -> bool:
    """Whether a cause that speaks for file `rel` names something."""
    if rel in FILE_CAUSES:
        return any(report[k] for k in FILE_CAUSES[rel])
    if rel.startswith('weights/') and rel.endswith('.safetensors'):
        node = rel[len('weights/'):-len('.safetensors')]
        return any(w['node'] == node for w in report['weights_changed'])
    if rel.startswith('groups/'):
        return any(report[k] for k in PROGRAM_CAUSES)
    return False


def other_files(report: dict, ra: str, rb: str) -> dict:
    """{path: what differs} for every file of the id (the manifest's `files`) that was added,
    removed or changed while no cause that speaks for it names anything: a resource (the
    tokenizer), a group's program rebuilt from the same nodes, weights, plan and tools, a file
    no cause reads. JSON files are listed by their differing keys, like the evidence."""
    out = {}
    for how in ('added', 'removed', 'changed'):
        for rel in report['files'].get(how, []):
            if _named(rel, report):
                continue
            if how == 'changed' and rel.endswith('.json'):
                out[rel] = leaves(deep_diff(_read_json(ra, rel), _read_json(rb, rel))) \
                    or 'changed'
            else:
                out[rel] = how
    return dict(sorted(out.items()))


def _identity(manifest: dict) -> dict:
    """The manifest's fields in the id that no other cause covers (name, schema, target)."""
    return {k: v for k, v in manifest.items()
            if k not in ('artifact_id', 'volatile', 'abi', 'created_by', 'files')}


def diff_artifacts(path_a: str, path_b: str) -> dict:
    """Plain data; the CAUSES keys are empty exactly when that kind of thing is unchanged,
    and one of them names something whenever the two ids differ."""
    a, b = open_artifact(path_a, verify=False), open_artifact(path_b, verify=False)
    report = {'a': {'artifact_id': a.id, 'name': a.manifest.get('name'), 'path': a.root},
              'b': {'artifact_id': b.id, 'name': b.manifest.get('name'), 'path': b.root},
              'identical': a.id == b.id}
    report['manifest'] = deep_diff(_identity(a.manifest), _identity(b.manifest))
    # the interface a caller feeds: cameras, joints, prompt, rate, input/output types
    report['abi'] = deep_diff(a.manifest['abi'], b.manifest['abi'])
    # an imported checkpoint: which files (by sha256) and which tensor filled which parameter
    report['checkpoint'] = deep_diff(read_provenance(a.root) or {},
                                     read_provenance(b.root) or {})
    report['spec'] = deep_diff(_read_json(a.root, SPEC) or {}, _read_json(b.root, SPEC) or {})
    report.update(diff_graph(a.graph, b.graph))
    report['graph'] = graph_rest(
        _read_json(a.root, 'graph.json'), _read_json(b.root, 'graph.json'),
        {*report['nodes_changed'], *report['nodes_added'], *report['nodes_removed']})
    report['weights_changed'] = diff_weights(a, b)
    report['plan_changed'] = diff_plan(a.plan, b.plan)
    report['precision_plan'] = diff_precision_plans(a.plan, b.plan)
    report['memory'] = diff_memory(a.memory, b.memory)
    report['evidence'] = diff_evidence(a.root, b.root)
    report['profile'] = diff_profile(a.root, b.root)
    report['created_by'] = deep_diff(a.manifest.get('created_by', {}),
                                     b.manifest.get('created_by', {}))
    report['files'] = _files(a.manifest, b.manifest)
    report['other_files'] = other_files(report, a.root, b.root)
    report['evidence_files'] = diff_evidence_files(a.manifest, b.manifest, a.root, b.root)
    report['changed'] = [k for k in CAUSES if report[k]]
    return report
