"""`lamp profile DIR --out FOLDER`: where an artifact's time goes, per stage and per op.

Every profiled tick is an inference tick: the runtime is reset before each (new episode, empty
chunker plan), so each of the N ticks runs the whole graph, sync and back to back, on a
synthetic observation, and every stage gets N samples. One warm-up tick is not counted. The
runtime profiler gives tick / inference / group / host-node latencies and the Chrome trace;
backends that can look inside a group add op-level tables (op_profile.py), which for ONNX Runtime
also split a fused group's time over the graph stages in it.

Writes into FOLDER (made if missing; the files of an earlier profile there are replaced)
trace.json (Chrome / Perfetto), hist.png, timeline.png, ops.json (the op-level tables) and
profile.json (runtime.profile() + top nodes + top ops), and for each cuda group
GROUP.kernels.json (the Chrome trace of its CUDA graphs' kernels over the profiled replays) and
GROUP.kernels.png (the last replay's kernel timeline). With save, the profile also goes to
DIR/evidence/profile.json and the manifest is re-signed; evidence/profile.json is a volatile
file (manifest.is_volatile): checksummed, but not part of the artifact id, which therefore
stays the same.
"""

from collections import defaultdict
import json
import os
import shutil

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from lamp_ros.artifact.manifest import read_manifest, write_manifest
from lamp_ros.runtime import Runtime
from lamp_ros.runtime.loop import synthetic_observation
from lamp_ros.runtime.report import print_profile
from lamp_ros.whitebox.inspect import PROFILE
from lamp_ros.whitebox.op_profile import backend_op_profiles
from lamp_ros.whitebox.plots import write_histogram, write_timeline

MODE = 'inference every tick (runtime.reset() before each), sync, back to back'
FILES = ('trace.json', 'hist.png', 'timeline.png', 'ops.json', 'profile.json')
# what the rows of the op table are, by the backend whose profile gave them
OP_KINDS = {'onnxruntime': 'ONNX Runtime op types', 'cuda': 'CUDA kernels'}


def top_nodes(runtime, profile: dict, op_profiles: dict, limit: int = 10) -> list:
    """Graph stages by p50 ms: host nodes from their own timers; stages fused into a group
    get the group's p50 split by their share of its kernel time, when the backend says."""
    rows = []
    for group in runtime.artifact.plan.groups:
        stats = profile['groups'].get(group.name)
        ops = op_profiles.get(group.name, {})
        if group.backend == 'host':
            for node in group.nodes:
                if profile['nodes'].get(node):
                    rows.append({'node': node, 'group': group.name, 'backend': 'host',
                                 'ms': profile['nodes'][node]['p50_ms'],
                                 'source': 'host timer', 'hint': ''})
        elif stats and 'stages' in ops:
            for stage, s in ops['stages'].items():
                rows.append({'node': stage, 'group': group.name, 'backend': group.backend,
                             'ms': stats['p50_ms'] * s['share'],
                             'source': 'group p50 x kernel share',
                             'hint': f'{s["hint"]} ({s["compute_pct"]:.0f}% GEMM-like; '
                                     f'top {s["top_op"]})'})
        elif stats:
            kinds = defaultdict(int)
            for layer in ops.get('layers', []):
                kinds[layer['hint'] or '?'] += layer['count']
            rows.append({'node': ','.join(group.nodes), 'group': group.name,
                         'backend': group.backend, 'ms': stats['p50_ms'],
                         'source': 'group timer',
                         'hint': ', '.join(f'{k} layers: {n}' for k, n in kinds.items())})
    return sorted(rows, key=lambda r: -r['ms'])[:limit]


def ops_by_type(op_profiles: dict) -> list:
    """ONNX op types summed over every profiled group, largest first."""
    total = defaultdict(lambda: {'ms': 0.0, 'calls': 0, 'groups': []})
    for name, prof in op_profiles.items():
        for op in prof.get('ops', []):
            row = total[op['op_type']]
            row['ms'] += op['ms']
            row['calls'] += op['calls']
            row['groups'].append(name)
            row.setdefault('backends', [])
            if prof.get('backend') not in row['backends']:
                row['backends'].append(prof.get('backend'))
            row['hint'] = op['hint']
    grand = sum(r['ms'] for r in total.values()) or 1.0
    return [{'op_type': k, **r, 'pct': 100.0 * r['ms'] / grand}
            for k, r in sorted(total.items(), key=lambda kv: -kv[1]['ms'])]


def op_table_title(rows: list) -> str:
    """What the op table holds: ONNX Runtime op types, CUDA kernels, or both, as the backends
    that gave its rows say (a CPU artifact's table has no CUDA kernels)."""
    backends = {b for r in rows for b in r.get('backends', ())}
    kinds = [OP_KINDS.get(b, f'{b} ops') for b in sorted(backends, key=str)] or ['op types']
    return f'top {" and ".join(kinds)} (kernel time per run)'


def _out_folder(out: str) -> str:
    if os.path.exists(out) and not os.path.isdir(out):
        raise ValueError(f'--out {out}: a file; lamp profile writes its files into a folder')
    os.makedirs(out, exist_ok=True)
    return out


def profile_artifact(path: str, out: str, ticks: int = 30, ort_runs: int = 5) -> dict:
    """Run, measure, write the five files (and the cuda groups' kernel traces) into the folder
    `out`; return the profile data (out/profile.json)."""
    if ticks < 1:
        raise ValueError(f'--ticks: must be >= 1, got {ticks}')
    out = _out_folder(out)
    runtime = Runtime.load(path, execution='sync', profile_window=max(1000, ticks))
    try:
        observation = synthetic_observation(runtime)
        captured = {}
        runtime.reset()
        runtime.run(runtime.feeds(observation, 0.0), capture=captured)  # warm-up, not counted
        runtime.profiler.reset()
        for k in range(ticks):
            runtime.reset()
            runtime.step(observation, k * runtime.period)
        profile = runtime.profile()
        trace = runtime.profiler.chrome_trace()
        op_profiles = backend_op_profiles(runtime, captured, ort_runs, out)
        profile.update(mode=MODE, top_nodes=top_nodes(runtime, profile, op_profiles),
                       ops_by_type=ops_by_type(op_profiles))
        profile['top_ops'] = profile['ops_by_type'][:10]
        profile['cuda_replays'] = {  # per cuda group: one replay of its graphs, by CUPTI
            name: {k: ops[k] for k in ('launches', 'span_ms', 'busy_ms', 'kernel_ms')}
            for name, ops in op_profiles.items() if ops.get('backend') == 'cuda'}
    finally:
        runtime.close()
    with open(os.path.join(out, 'trace.json'), 'w', encoding='utf-8') as f:
        json.dump(trace, f)
    write_histogram(trace, os.path.join(out, 'hist.png'))
    write_timeline(trace, os.path.join(out, 'timeline.png'))
    with open(os.path.join(out, 'ops.json'), 'w', encoding='utf-8') as f:
        json.dump(op_profiles, f, indent=1)
    with open(os.path.join(out, 'profile.json'), 'w', encoding='utf-8') as f:
        json.dump(profile, f, indent=1, allow_nan=False)
    return profile


def save_profile(path: str, out: str) -> dict:
    """Copy out/profile.json into the artifact's evidence and re-sign its manifest."""
    root = os.path.abspath(path)
    manifest = read_manifest(root)
    shutil.copyfile(os.path.join(out, 'profile.json'), os.path.join(root, PROFILE))
    return write_manifest(root, manifest['target'], manifest['abi'], manifest['created_by'],
                          manifest.get('name', ''))


# ---- rendering -------------------------------------------------------------------------------

def _table(title: str, columns, rows) -> Table:
    table = Table(title=title, title_justify='left')
    for col in columns:  # CUDA kernel names run to hundreds of characters: one line each
        table.add_column(col, justify='right' if col.endswith(('ms', '%', 'calls')) else 'left',
                         no_wrap=col == 'op type', overflow='ellipsis',
                         max_width=72 if col == 'op type' else None)
    for row in rows:
        table.add_row(*(escape(str(c)) for c in row))
    return table


def print_top(profile: dict, console: Console) -> None:
    console.print(_table('top 10 nodes by p50 time per inference tick',
                         ('node', 'group', 'backend', 'p50 ms', 'hint', 'source'),
                         [(r['node'], r['group'], r['backend'], f'{r["ms"]:.3f}', r['hint'],
                           r['source']) for r in profile['top_nodes']]))
    if profile['top_ops']:
        console.print(_table(op_table_title(profile['top_ops']),
                             ('op type', 'calls', 'ms', '%', 'hint'),
                             [(o['op_type'], o['calls'], f'{o["ms"]:.3f}', f'{o["pct"]:.1f}',
                               o['hint']) for o in profile['top_ops']]))


def run_profile(path: str, out: str, ticks: int = 30, save: bool = False,
                ort_runs: int = 5) -> int:
    """`lamp profile`: measure, write the files, print the tables (and save when asked)."""
    profile = profile_artifact(path, out, ticks=ticks, ort_runs=ort_runs)
    console = Console(width=max(140, Console().width))
    print_profile(profile, title=f'lamp profile {path} ({ticks} ticks, {MODE})', console=console)
    print_top(profile, console)
    console.print(f'wrote into {escape(out)}: {", ".join(FILES)}')
    for group, replay in profile['cuda_replays'].items():
        console.print(f'wrote {escape(os.path.join(out, group))}.kernels.json and .png ({group}: '
                      f'{replay["launches"]} GPU events a replay over {replay["span_ms"]:.2f} '
                      f'ms, busy {replay["busy_ms"]:.2f})')
    if save:
        manifest = save_profile(path, out)
        console.print(f'saved {PROFILE} into {escape(path)} (artifact id '
                      f'{manifest["artifact_id"][:16]})')
    return 0
