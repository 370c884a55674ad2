"""`lamp diff A B`: what differs between two artifacts, cause by cause.

Causes (what was built differently): the ABI (cameras, joints, prompt, rate, types), graph
nodes (by node id, "changed" when the content hash differs, with the differing attrs, types and
weights spelled out), weight tensors, the build
plan (backend, precision, device, grouping, tuned tiles) and the memory plan. Effects (what was
measured): parity evidence and saved profiles, with the largest latency increase named, and
every other evidence file that differs (build timings, how tuned choices were made), which is
not part of the artifact id. Every category is empty when nothing in it changed, so "A vs A",
or one spec built twice, is a report of empty causes.
"""

import json
import os

import numpy as np

from lamp_ros.artifact.load import open_artifact
from lamp_ros.artifact.manifest import content_digest, read_provenance
from lamp_ros.backends.text_lengths import captured_lengths
from lamp_ros.whitebox.inspect import PARITY, PROFILE, read_evidence

CAUSES = ('abi', 'checkpoint', 'nodes_changed', 'nodes_added', 'nodes_removed',
          'weights_changed', 'plan_changed', 'memory')
MISSING = None  # stands for "absent on this side" in [a, b] pairs


def deep_diff(a, b) -> dict | list:
    """{key: [a, b]} for every differing leaf of two JSON-like dicts (nested dicts recurse);
    anything else that differs is one [a, b] pair."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = {}
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                out[key] = [a.get(key, MISSING), b.get(key, MISSING)]
            elif a[key] != b[key]:
                out[key] = deep_diff(a[key], b[key])
        return out
    return [a, b]


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


# ---- plan ------------------------------------------------------------------------------------

def _group_row(g) -> dict:
    return {'name': g.name, 'backend': g.backend, 'precision': g.precision, 'device': g.device,
            'nodes': list(g.nodes), 'side_stages': list(g.side_stages),
            'text_lengths': captured_lengths(g.build),
            'gemm_algorithms': (g.build or {}).get('cublaslt'),
            'tiles': (g.build or {}).get('tiles'),
            'exporter': (g.build or {}).get('exporter')}


def diff_plan(pa, pb) -> dict:
    """Per node: backend, precision, device and group membership; per group (matched by its
    members, since names are positional): added, removed, or changed attributes (the ONNX
    exporter among them); the passes applied and the spec's build options."""
    out = {}
    if pa.target != pb.target:
        out['target'] = [pa.target, pb.target]
    if list(pa.passes) != list(pb.passes):
        out['passes'] = [list(pa.passes), list(pb.passes)]
    if pa.options != pb.options:
        out['options'] = deep_diff(pa.options, pb.options)
    ga = {n: g for g in pa.groups for n in g.nodes}
    gb = {n: g for g in pb.groups for n in g.nodes}
    nodes = {}
    for node in [n for n in gb if n in ga]:
        x, y = ga[node], gb[node]
        change = {f: [getattr(x, f), getattr(y, f)] for f in ('backend', 'precision', 'device')
                  if getattr(x, f) != getattr(y, f)}
        if x.nodes != y.nodes:
            change['group'] = [{'name': x.name, 'nodes': list(x.nodes)},
                               {'name': y.name, 'nodes': list(y.nodes)}]
        if pa.phases.get(node) != pb.phases.get(node):
            change['phase'] = [pa.phases.get(node), pb.phases.get(node)]
        if change:
            nodes[node] = change
    by_members_a = {g.nodes: g for g in pa.groups}
    by_members_b = {g.nodes: g for g in pb.groups}
    groups = {'added': [_group_row(g) for m, g in by_members_b.items() if m not in by_members_a],
              'removed': [_group_row(g) for m, g in by_members_a.items()
                          if m not in by_members_b],
              'changed': {}, 'renamed': {}}
    for members, y in by_members_b.items():
        x = by_members_a.get(members)
        if x is not None:
            change = deep_diff(_group_row(x), _group_row(y))
            if change.pop('name', None):  # names are positional: a rename is no change
                groups['renamed'][x.name] = y.name
            if change:
                groups['changed'][y.name] = change
    if nodes:
        out['nodes'] = nodes
    out.update({f'groups_{k}': v for k, v in groups.items() if v})
    return out


# ---- memory ----------------------------------------------------------------------------------

def _buffers(memory: dict) -> dict:
    return {b['name']: {'arena': a['device'], 'size': b['size'], 'offset': b['offset']}
            for a in memory['arenas'] for b in a['buffers']}


def diff_memory(ma: dict, mb: dict) -> dict:
    out = {}
    summary = {k: {'a': ma['summary'].get(k), 'b': mb['summary'].get(k),
                   'delta': (mb['summary'].get(k) or 0) - (ma['summary'].get(k) or 0)}
               for k in ('arena_bytes', 'lower_bound_bytes', 'naive_bytes', 'efficiency',
                         'buffers')
               if ma['summary'].get(k) != mb['summary'].get(k)}
    arenas_a = {a['device']: a['arena_bytes'] for a in ma['arenas']}
    arenas_b = {a['device']: a['arena_bytes'] for a in mb['arenas']}
    arenas = deep_diff(arenas_a, arenas_b)
    ba, bb = _buffers(ma), _buffers(mb)
    buffers = {name: deep_diff(ba.get(name) or {}, bb.get(name) or {})
               for name in sorted(set(ba) | set(bb)) if ba.get(name) != bb.get(name)}
    for key, value in (('summary', summary), ('arenas', arenas), ('buffers', buffers)):
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


def _leaves(tree, depth: int = 3, prefix: str = '') -> list:
    """Dotted paths of a deep_diff's leaves, cut at `depth` keys ({'a': {'b': [x, y]}} ->
    ['a.b']): `groups.g03_cuda.tuning`, not each of its hundred timings."""
    if isinstance(tree, dict) and depth > 0:
        return list(dict.fromkeys(leaf for key, sub in tree.items()
                                  for leaf in _leaves(sub, depth - 1, f'{prefix}{key}.')))
    return [prefix.rstrip('.')]


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
                out[rel] = _leaves(deep_diff(json.load(fa), json.load(fb)))
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


def diff_artifacts(path_a: str, path_b: str) -> dict:
    """Plain data; the CAUSES keys are empty exactly when that kind of thing is unchanged."""
    a, b = open_artifact(path_a, verify=False), open_artifact(path_b, verify=False)
    report = {'a': {'artifact_id': a.id, 'name': a.manifest.get('name'), 'path': a.root},
              'b': {'artifact_id': b.id, 'name': b.manifest.get('name'), 'path': b.root},
              'identical': a.id == b.id}
    # the interface a caller feeds: cameras, joints, prompt, rate, input/output types
    report['abi'] = deep_diff(a.manifest['abi'], b.manifest['abi'])
    # an imported checkpoint: which files (by sha256) and which tensor filled which parameter
    report['checkpoint'] = deep_diff(read_provenance(a.root) or {},
                                     read_provenance(b.root) or {})
    report.update(diff_graph(a.graph, b.graph))
    report['weights_changed'] = diff_weights(a, b)
    report['plan_changed'] = diff_plan(a.plan, b.plan)
    report['memory'] = diff_memory(a.memory, b.memory)
    report['evidence'] = diff_evidence(a.root, b.root)
    report['profile'] = diff_profile(a.root, b.root)
    report['created_by'] = deep_diff(a.manifest.get('created_by', {}),
                                     b.manifest.get('created_by', {}))
    report['files'] = _files(a.manifest, b.manifest)
    report['evidence_files'] = diff_evidence_files(a.manifest, b.manifest, a.root, b.root)
    report['changed'] = [k for k in CAUSES if report[k]]
    return report
