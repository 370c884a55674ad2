"""`lamp inspect`: what an artifact is, from its own files, as plain data or rich tables.

The report is built from manifest.json, graph.json, plan.json, memory.json and the evidence,
without checking checksums (that is `lamp verify`): a damaged artifact can still be inspected,
which is usually when one wants to look at it.
"""

import json
import os

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from lamp_ros.artifact.load import open_artifact
from lamp_ros.artifact.manifest import read_provenance
from lamp_ros.backends.text_lengths import captured_lengths

PARITY = 'evidence/parity.json'
PROFILE = 'evidence/profile.json'


def read_evidence(root: str, rel: str) -> dict | None:
    """An evidence JSON file, or None when the artifact has none (profiles are optional)."""
    path = os.path.join(root, rel)
    if not os.path.isfile(path):
        return None
    with open(path, encoding='utf-8') as f:
        return json.load(f)


def _type_text(t: dict) -> str:
    return f'{t["dtype"]}[{",".join(str(d) for d in t["shape"])}]'


def profile_summary(profile: dict | None) -> dict | None:
    """The part of a saved profile worth showing next to the plan: p50 per stage, top ops."""
    if not profile:
        return None
    p50 = {section: {name: s['p50_ms'] for name, s in profile.get(section, {}).items() if s}
           for section in ('groups', 'nodes')}
    return {'ticks': profile.get('ticks'), 'deadline_misses': profile.get('deadline_misses'),
            'tick_p50_ms': (profile.get('tick') or {}).get('p50_ms'),
            'inference_p50_ms': (profile.get('inference') or {}).get('p50_ms'),
            'groups_p50_ms': p50['groups'], 'nodes_p50_ms': p50['nodes'],
            'top_nodes': profile.get('top_nodes', [])[:10],
            'top_ops': profile.get('top_ops', [])[:10]}


def _members(group: dict) -> str:
    """Member stages in order; those captured from a second stream say so, a group captured
    for several prompt lengths names them, one with a precision plan says how many layers it
    lowered, and one with GEMMs on stored cuBLASLt algorithms says how many and where they
    were measured."""
    side = set(group.get('side_stages', ()))
    members = ', '.join(n + (' (side stream)' if n in side else '') for n in group['nodes'])
    lengths = group.get('text_lengths')
    if lengths:
        check = group.get('text_check')
        checked = (f', each checked against the full one: max rel {max(check.values()):.2g}'
                   if check else '')
        members += f'; prompt lengths {", ".join(map(str, lengths))}{checked}'
    planned = group.get('precision_plan')
    if planned:
        lowered = [n for n, d in planned['layers'].items()
                   if d['precision'] == planned['lowered_to']]
        members += (f'; precision plan: {len(lowered)} of {len(planned["layers"])} layers in '
                    f'{planned["lowered_to"]} (evidence/precision.json)')
    stored = group.get('gemm_algorithms')
    if stored:
        members += (f'; {stored["linears"]} linears on stored cuBLASLt algorithms (cuBLASLt '
                    f'{stored["cublaslt"]}, {stored["gpu"]})')
    return members


def inspect_artifact(path: str) -> dict:
    """Plain data: identity, target, versions, ABI, groups, coverage, memory, parity, profile."""
    artifact = open_artifact(path, verify=False)
    root, manifest, graph, plan = artifact.root, artifact.manifest, artifact.graph, artifact.plan
    hashes = graph.hashes()
    group_of = {n: g.name for g in plan.groups for n in g.nodes}
    groups = [{'name': g.name, 'backend': g.backend, 'precision': g.precision,
               'device': g.device, 'phase': plan.phases[g.nodes[0]], 'nodes': list(g.nodes),
               'node_count': len(g.nodes), 'inputs': list(g.inputs),
               'outputs': list(g.outputs), 'reason': g.reason,
               'side_stages': list(g.side_stages),
               'text_lengths': captured_lengths(g.build),
               'text_check': g.build.get('text_check'),
               'gemm_algorithms': g.build.get('cublaslt'),
               'precision_plan': g.build.get('precision_plan')}
              for g in plan.groups]
    nodes = [{'id': n.id, 'op': n.op, 'kind': n.kind, 'group': group_of.get(n.id),
              'hash': hashes[n.id], 'ops': len(n.subgraph.ops) if n.subgraph else 0,
              'weights': len(n.weights)} for n in graph.nodes]
    memory = {'summary': artifact.memory['summary'],
              'arenas': [{k: v for k, v in a.items() if k != 'buffers'}
                         | {'buffers': len(a['buffers'])} for a in artifact.memory['arenas']]}
    parity = read_evidence(root, PARITY)
    if parity:
        parity = {'passed': parity['passed'], 'tolerance': parity['tolerance'],
                  'samples': len(parity['samples']), 'worst': parity['worst']}
    files = {**manifest['files'], **manifest.get('volatile', {})}
    user_ops = [{'module': module, 'sha256': entry['sha256'], 'ops': entry['ops'],
                 'group': g.name}
                for g in plan.groups for module, entry in g.build.get('modules', {}).items()]
    return {
        'artifact_id': manifest['artifact_id'], 'name': manifest.get('name', ''),
        'path': root, 'schema_version': manifest['schema_version'],
        'target': manifest['target'], 'created_by': manifest.get('created_by', {}),
        'abi': manifest['abi'],
        'files': {'count': len(files), 'bytes': sum(e['size'] for e in files.values())},
        'groups': groups, 'nodes': nodes, 'user_ops': user_ops,
        'coverage': plan.coverage, 'memory': memory,
        'parity': parity, 'profile': profile_summary(read_evidence(root, PROFILE)),
        'checkpoint': checkpoint_summary(read_provenance(root)),
    }


def checkpoint_summary(provenance: dict | None) -> dict | None:
    """An imported checkpoint's identity without the per-tensor map (provenance.json has it)."""
    if not provenance:
        return None
    return {k: v for k, v in provenance.items() if k != 'tensors'} | {
        'tensors_mapped': len(provenance.get('tensors', {}))}


# ---- rendering -------------------------------------------------------------------------------

def _table(title: str, columns, rows) -> Table:
    table = Table(title=title, title_justify='left')
    for col in columns:
        table.add_column(col, overflow='fold')
    for row in rows:
        table.add_row(*(escape(str(c)) for c in row))
    return table


def _mb(n: int) -> str:
    return f'{n / 1e6:.3f} MB'


def print_inspect(report: dict, console: Console) -> None:
    console.print(f'[bold]artifact[/] {report["artifact_id"]}  name {report["name"]}  target '
                  f'{report["target"]}  schema {report["schema_version"]}  '
                  f'{report["files"]["count"]} files, {_mb(report["files"]["bytes"])}')
    versions = sorted(report['created_by'].items())
    console.print('created by: ' + ', '.join(f'{k} {v}' for k, v in versions))
    abi = report['abi']
    rows = [('input', v, _type_text(t)) for v, t in abi['inputs'].items()]
    rows += [('output', v, _type_text(t)) for v, t in abi['outputs'].items()]
    rows += [('state', v, _type_text(t)) for v, t in abi['state'].items()]
    prompt = '; a task prompt' if abi.get('prompt', 'prompt' in abi['inputs']) else '; no prompt'
    console.print(_table(f'ABI: cameras {", ".join(abi["camera_slots"]) or "none"}; '
                         f'{len(abi["joint_names"])} joints{prompt}; {abi["rate_hz"]} Hz',
                         ('role', 'value', 'type'), rows))
    robot = abi.get('robot')
    if robot:  # the robot the spec named (spec/robot.py): what the node subscribes to
        console.print(_table(f'robot {robot["name"]}: {len(robot["joints"])} joints, actions '
                             f'{robot["action"]["kind"]}',
                             ('joint / camera', 'limits / topic', 'max step / encoding'),
                             [(j['name'], f'[{j["lower"]:g}, {j["upper"]:g}]',
                               f'{j["max_step"]:g}') for j in robot['joints']]
                             + [(slot, c['topic'], f'{c["encoding"]} {c["width"]}x{c["height"]}')
                                for slot, c in robot['cameras'].items()]))
    ckpt = report['checkpoint']
    if ckpt:
        console.print(_table(f'weights from a {ckpt["format"]} checkpoint: '
                             f'{ckpt["parameters"] / 1e6:.2f} M parameters, stored '
                             f'{ckpt["stored_dtype"]}, run {ckpt["model_dtype"]} '
                             f'({ckpt["cast_tensors"]} tensors cast); never read: '
                             f'{", ".join(ckpt["never_read"]) or "nothing"}',
                             ('file', 'sha256'), sorted(ckpt['files'].items())))
    if report['user_ops']:  # ops/plugins.py: imported and checked when the artifact loads
        console.print(_table('host operators from outside lamp_ros',
                             ('module', 'sha256 of its source', 'operators', 'group'),
                             [(u['module'], u['sha256'][:16], ', '.join(u['ops']), u['group'])
                              for u in report['user_ops']]))
    console.print(_table('groups (execution order)',
                         ('group', 'backend', 'precision', 'device', 'phase', 'nodes', 'members'),
                         [(g['name'], g['backend'], g['precision'], g['device'], g['phase'],
                           g['node_count'], _members(g)) for g in report['groups']]))
    cov = report['coverage']
    console.print(_table(f'coverage: {cov["total_nodes"]} nodes, {cov["total_ops"]} ops',
                         ('backend', 'nodes', 'ops', 'ops %'),
                         [(b, c['nodes'], c['ops'], c['ops_pct'])
                          for b, c in sorted(cov['backends'].items())]))
    for fb in cov.get('fallbacks', []):
        console.print(f'  fallback: {escape(json.dumps(fb))}')
    mem = report['memory']
    s = mem['summary']
    console.print(_table(f'memory: arena {_mb(s["arena_bytes"])}, lower bound '
                         f'{_mb(s["lower_bound_bytes"])}, naive {_mb(s["naive_bytes"])}, '
                         f'efficiency {s["efficiency"]:.3f}',
                         ('arena', 'buffers', 'arena bytes', 'lower bound', 'naive',
                          'efficiency'),
                         [(a['device'], a['buffers'], a['arena_bytes'], a['lower_bound_bytes'],
                           a['naive_bytes'], f'{a["efficiency"]:.3f}')
                          for a in mem['arenas']]))
    parity = report['parity']
    if parity:
        tol = parity['tolerance']
        console.print(_table(f'parity vs eager reference: '
                             f'{"passed" if parity["passed"] else "FAILED"} on '
                             f'{parity["samples"]} samples (atol {tol["atol"]}, rtol '
                             f'{tol["rtol"]})', ('value', 'max abs', 'max rel', 'ok'),
                             [(v, f'{w["max_abs"]:.3g}', f'{w["max_rel"]:.3g}',
                               'ok' if w['passed'] else 'FAIL')
                              for v, w in parity['worst'].items()]))
    else:
        console.print('parity: no evidence/parity.json')
    prof = report['profile']
    if not prof:
        console.print('profile: none saved (lamp profile DIR --out FOLDER --save)')
        return
    groups = sorted(prof['groups_p50_ms'].items(), key=lambda kv: -kv[1])
    rows = [('group', k, f'{v:.3f}') for k, v in groups]
    rows += [('node', n['node'], f'{n["ms"]:.3f}') for n in prof['top_nodes']]
    console.print(_table(f'profile ({prof["ticks"]} ticks): tick p50 '
                         f'{prof["tick_p50_ms"] or 0:.2f} ms, inference p50 '
                         f'{prof["inference_p50_ms"] or 0:.2f} ms', ('what', 'name', 'p50 ms'),
                         rows))


def run_inspect(path: str, as_json: bool = False) -> int:
    """`lamp inspect`: print the report (JSON or tables)."""
    report = inspect_artifact(path)
    if as_json:
        print(json.dumps(report, indent=1))
    else:
        print_inspect(report, Console(width=max(120, Console().width)))
    return 0
