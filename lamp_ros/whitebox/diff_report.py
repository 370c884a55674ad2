"""`lamp diff`'s text report: the plain-data diff (whitebox/diff.py) as one section per
cause and effect, each saying `unchanged` when empty."""

import json

from rich.console import Console
from rich.markup import escape

from lamp_ros.whitebox.diff import diff_artifacts


def _pair(pair) -> str:
    return f'{pair[0]} -> {pair[1]}'


def _group_text(g: dict) -> str:
    return f'{g["name"]}[{", ".join(g["nodes"])}]'


def _plan_lines(plan: dict) -> list:
    lines = [f'target {_pair(plan["target"])}'] if 'target' in plan else []
    if 'passes' in plan:
        before, after = (set(p) for p in plan['passes'])
        lines.append('passes ' + ' '.join([f'-{p}' for p in plan['passes'][0] if p not in after]
                                          + [f'+{p}' for p in plan['passes'][1]
                                             if p not in before]
                                          or [_pair(plan['passes'])]))
    lines += [f'build.{k} {_pair(v)}' for k, v in plan.get('options', {}).items()]
    for node, c in plan.get('nodes', {}).items():
        parts = [f'{k} {_pair(v)}' for k, v in c.items() if k != 'group']
        if 'group' in c:
            parts.append(f'group {_group_text(c["group"][0])} -> {_group_text(c["group"][1])}')
        lines.append(f'~ {node}: ' + '; '.join(parts))
    for sign, key in (('-', 'groups_removed'), ('+', 'groups_added')):
        lines += [f'{sign} group {_group_text(g)} {g["backend"]} {g["precision"]} {g["device"]}'
                  for g in plan.get(key, [])]
    lines += [f'~ group {name}: {json.dumps(c)}' for name, c in
              plan.get('groups_changed', {}).items()]
    lines += [f'  group renamed {_pair(p)}' for p in plan.get('groups_renamed', {}).items()]
    return lines


def _memory_lines(memory: dict) -> list:
    lines = [f'{k}: {v["a"]} -> {v["b"]} ({v["delta"]:+})'
             for k, v in memory.get('summary', {}).items()]
    lines += [f'arena {name}: {_pair(v)}' for name, v in memory.get('arenas', {}).items()]
    lines += [f'buffer {name}: ' + '; '.join(f'{k} {_pair(v)}' for k, v in c.items())
              for name, c in memory.get('buffers', {}).items()]
    return lines


def _evidence_lines(evidence: dict) -> list:
    lines = [f'{k}: {_pair(v)}' for k, v in evidence.items() if k != 'parity']
    for name, c in evidence.get('parity', {}).items():
        lines.append(f'parity {name}: ' + '; '.join(
            f'{k} {v["a"]:.3g} -> {v["b"]:.3g}' if isinstance(v['a'], float)
            and isinstance(v['b'], float) else f'{k} {v["a"]} -> {v["b"]}'
            for k, v in c.items()))
    return lines


def _evidence_file_line(rel: str, what) -> str:
    if isinstance(what, str):
        return f'{rel}: {what}'
    shown = ', '.join(what[:6]) + (f' (+{len(what) - 6} more)' if len(what) > 6 else '')
    return f'{rel}: {shown}'


def _graph_lines(report: dict) -> list:
    lines = []
    for node, c in report['nodes_changed'].items():
        what = [f'attrs {json.dumps(c["attrs"])}' if c['attrs'] else '',
                f'weights ({len(c["weights"])} tensors)' if c['weights'] else '',
                *[f'{f} types {json.dumps(c[f])}' for f in ('inputs', 'outputs', 'state')
                  if c[f]],
                *[f'{f} {_pair(c[f])}' for f in ('op', 'kind', 'ports') if f in c]]
        lines.append(f'~ {node} {_pair(c["hash"])}: ' + '; '.join(w for w in what if w))
    lines += [f'+ {n}' for n in report['nodes_added']]
    return lines + [f'- {n}' for n in report['nodes_removed']]


def _profile_lines(prof: dict) -> list:
    if 'available' in prof:
        return [f'saved profile (evidence/profile.json) in A, B: {prof["available"]}']
    lines = [f'{k} p50 {v["a"]:.3f} -> {v["b"]:.3f} ms ({v["delta_ms"]:+.3f})'
             for k, v in prof.items() if k in ('tick', 'inference')]
    for section in ('groups', 'nodes'):
        for name, row in sorted(prof.get(section, {}).items(),
                                key=lambda kv: -(kv[1]['delta_ms'] or 0.0)):
            if row['delta_ms'] is not None:
                lines.append(f'{section[:-1]} {name}: {row["a"]:.3f} -> {row["b"]:.3f} ms '
                             f'({row["delta_ms"]:+.3f})')
            else:
                lines.append(f'{section[:-1]} {name}: {row["a"]} -> {row["b"]}')
    if prof.get('top_hot_spot'):
        hot = prof['top_hot_spot']
        lines.append(f'top hot spot: {hot["kind"]} {hot["name"]} {hot["delta_ms"]:+.3f} ms p50')
    return lines


def print_diff(report: dict, console: Console) -> None:
    a, b = report['a'], report['b']
    console.print(f'[bold]diff[/] {a["artifact_id"][:16]} ({escape(a["path"])}) -> '
                  f'{b["artifact_id"][:16]} ({escape(b["path"])})'
                  + ('  [green]identical[/]' if report['identical'] else ''))
    console.print('[bold]causes changed:[/] ' + (', '.join(report['changed']) or 'none'))
    weights = [f'~ {w["node"]}/{w["tensor"]} {w["shape"]} {w["change"]}'
               + ('' if w['max_abs_delta'] is None else
                  f' max abs delta {w["max_abs_delta"]:.3g}')
               for w in report['weights_changed']]
    abi = [f'{key}: {json.dumps(change)}' for key, change in report['abi'].items()]
    checkpoint = [f'{key}: {json.dumps(change)}' for key, change in report['checkpoint'].items()]
    sections = (('abi', abi), ('checkpoint', checkpoint), ('graph', _graph_lines(report)),
                ('weights', weights),
                ('plan', _plan_lines(report['plan_changed'])),
                ('memory plan', _memory_lines(report['memory'])),
                ('evidence', _evidence_lines(report['evidence'])),
                ('tool versions', [f'{k}: {_pair(v)}' for k, v in
                                   report['created_by'].items()]),
                ('files', [f'{k}: {", ".join(v)}' for k, v in report['files'].items()]),
                ('build evidence (not part of the id)',
                 [_evidence_file_line(rel, what) for rel, what in
                  report['evidence_files'].items()]),
                ('profile', _profile_lines(report['profile'])))
    for title, lines in sections:
        console.print(f'[bold]{title}[/]' + ('' if lines else ': unchanged'))
        for line in lines:
            console.print('  ' + escape(line))


def run_diff(path_a: str, path_b: str, as_json: bool = False,
             fail_on_change: bool = False) -> int:
    """`lamp diff`: a report, so 0, unless fail_on_change and a cause category changed."""
    report = diff_artifacts(path_a, path_b)
    if as_json:
        print(json.dumps(report, indent=1))
    else:
        print_diff(report, Console(width=max(120, Console().width)))
    return 1 if fail_on_change and report['changed'] else 0
