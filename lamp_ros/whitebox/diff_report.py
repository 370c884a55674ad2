"""`lamp diff`'s text report: the plain-data diff (whitebox/diff.py) as one section per
cause and effect, each saying `unchanged` when empty."""

import json

from rich.console import Console
from rich.markup import escape

from lamp_ros.whitebox.diff import diff_artifacts
from lamp_ros.whitebox.json_diff import flat_pairs

SHORT = 100  # characters of one value in a text line (--json has it whole)
PLAN_KEYS = ('target', 'passes', 'options', 'nodes', 'groups_added', 'groups_removed',
             'groups_changed', 'groups_renamed')  # the rest: `key: its diff`


def _pair(pair) -> str:
    return f'{pair[0]} -> {pair[1]}'


def _short(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= SHORT else text[:SHORT - 3] + '...'


def _pair_lines(tree, prefix: str = '') -> list:
    """`prefix.path: a -> b` for every leaf of a deep_diff, long values cut."""
    return [f'{".".join(p for p in (prefix, path) if p)}: {_short(a)} -> {_short(b)}'
            for path, (a, b) in flat_pairs(tree)]


def _build_lines(name: str, build: dict) -> list:
    """A group's other build keys: a value's change, or how many entries of a mapping (its
    weight bindings) differ, the first few named."""
    lines = []
    for key, change in build.items():
        if isinstance(change, dict):
            keys = change['entries']
            lines.append(f'~ group {name} build.{key}: {len(keys)} entries differ ('
                         + _short(', '.join(keys[:3]) + (', ...' if len(keys) > 3 else ''))
                         + ')')
        else:
            lines.append(f'~ group {name} build.{key}: {_short(change[0])} -> '
                         f'{_short(change[1])}')
    return lines


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
    for name, c in plan.get('groups_changed', {}).items():
        named = {k: v for k, v in c.items() if k != 'build'}
        lines += [f'~ group {name}: {json.dumps(named)}'] if named else []
        lines += _build_lines(name, c.get('build', {}))
    lines += [line for key in plan if key not in PLAN_KEYS
              for line in _pair_lines(plan[key], key)]
    lines += [f'  group renamed {_pair(p)}' for p in plan.get('groups_renamed', {}).items()]
    return lines


def _memory_lines(memory: dict) -> list:
    lines = [f'{k}: {v["a"]} -> {v["b"]}' + ('' if v['delta'] is None else f' ({v["delta"]:+})')
             for k, v in memory.get('summary', {}).items()]
    lines += [f'arena {name}: ' + '; '.join(f'{path} {_pair(v)}'.lstrip()
                                            for path, v in flat_pairs(c))
              for name, c in memory.get('arenas', {}).items()]
    lines += [f'buffer {name}: ' + '; '.join(f'{k} {_pair(v)}' for k, v in c.items())
              for name, c in memory.get('buffers', {}).items()]
    return lines + _pair_lines(memory.get('other', {}))


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
    lines += [f'- {n}' for n in report['nodes_removed']]
    return lines + [f'graph.json: {path}' for path in report['graph']]


def _side(lowered: int, candidates: int, precision) -> str:
    return f'{lowered} of {candidates} layers in {precision}' if precision else 'no plan'


def _precision_lines(plans: dict) -> list:
    """Per group: how many layers each side lowers, every layer lowered in B only (+) or in A
    only (-) with B's reason, every other layer whose decision changed (~)."""
    lines = []
    for group, c in plans.items():
        (na, ta), (nb, tb) = c['low_precision']
        to_a, to_b = c['lowered_to']
        lines.append(f'group {group}: {_side(na, ta, to_a)} -> {_side(nb, tb, to_b)}')
        lines += [f'  {key}: {_short(pair[0])} -> {_short(pair[1])}'
                  for key, pair in c.items() if key not in ('lowered_to', 'lowered',
                                                            'restored', 'low_precision',
                                                            'layers')]
        layers = c['layers']
        for name in c['lowered']:
            lines.append(f'+ {name} in {to_b}: {layers[name][1]["why"]}')
        for name in c['restored']:
            b = layers[name][1]
            lines.append(f'- {name} ' + (f'back in {b["precision"]}: {b["why"]}' if b else
                                         'no longer a candidate'))
        others = [n for n in layers if n not in c['lowered'] and n not in c['restored']]
        both = [n for n in others if None not in layers[n]]
        for name in both:
            a, b = layers[name]
            lines.append(f'~ {name} {a["precision"]}: {b["why"]} (was: {a["why"]})')
        one_side = [d for n in others if n not in both for d in layers[n] if d]
        if one_side:
            kept = ', '.join(sorted({d['precision'] for d in one_side}))
            lines.append(f'  {len(one_side)} other candidate layers of one side kept in {kept} '
                         '(why each: --json)')
    return lines


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
    sections = (('manifest', _pair_lines(report['manifest'])), ('abi', abi),
                ('checkpoint', checkpoint), ('spec', _pair_lines(report['spec'])),
                ('graph', _graph_lines(report)), ('weights', weights),
                ('plan', _plan_lines(report['plan_changed'])),
                ('precision plan', _precision_lines(report['precision_plan'])),
                ('memory plan', _memory_lines(report['memory'])),
                ('tool versions', [f'{k}: {_pair(v)}' for k, v in
                                   report['created_by'].items()]),
                ('other files of the id', [_evidence_file_line(rel, what) for rel, what in
                                           report['other_files'].items()]),
                ('evidence', _evidence_lines(report['evidence'])),
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
