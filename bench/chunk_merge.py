"""How each chunk merge mode copes with inference latency, in closed loop: the trained demo
policy on the MuJoCo world's moving task (the bin slides while the arm carries the cube), one
table for every mode and latency, each success rate with its 95% CI.

    python3 bench/chunk_merge.py [--spec config/specs/viperx_pick_place_demo.yaml |
                                  --artifact artifacts/viperx_pick_place_demo]
                                 [--world viperx_pick_place] [--moving 0.05] [--episodes 30]
                                 [--workers 2] [--latencies 0 2 4 8]
                                 [--out bench/results/chunk_merge_world.json]

With `--spec` (the default) the spec's eager policy runs every mode, real-time chunking's
trained and guided modes included (guided needs the backward pass of the eager expert). With
`--artifact`, its Runtime runs each mode by overriding the chunker's merge mode; rtc only in the
mode the artifact was built for.

For each merge mode (ops/chunker.py MERGE_CHOICES) and injected latency D (each tick sees the
observation of D ticks earlier: the chunk it starts is D ticks late, its first actions already
due), the same episodes (same seed) report success with its Wilson 95% interval, mean error,
RMS jerk, and the largest command jump and kink at a chunk boundary (sim/evaluate.py). The PNG
beside the JSON draws each against the latency, one line per mode.
"""

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from lamp_ros.ops.chunker import MERGE_CHOICES  # noqa: E402
from lamp_ros.provenance import provenance  # noqa: E402
from lamp_ros.sim.parallel import EvalSetup, run_episodes  # noqa: E402

KEYS = ('success_rate', 'success_ci', 'mean_error', 'rms_jerk', 'max_boundary_jump',
        'max_boundary_kink')
MODES = ('latest', 'temporal_ensemble', 'crossfade', 'rtc/trained', 'rtc/guided')


def measure(path: str, world: str, moving: float | None, modes, latencies, episodes: int,
            workers: int, seed: int, seconds: float | None = None) -> list:
    """`path`: an artifact, or a spec (its eager pipeline)."""
    rows = []
    for mode in modes:
        for latency in latencies:
            start = time.perf_counter()
            setup = EvalSetup(path, world, moving, mode, seed=seed, seconds=seconds,
                              latency_ticks=latency)
            report, _, _ = run_episodes(setup, episodes, workers)
            rows.append({'merge_mode': mode, 'latency_ticks': latency,
                         **{k: report[k] for k in KEYS}})
            low, high = report['success_ci']
            print(f'{mode:18s} latency {latency} ticks: success {report["success_rate"]:.0%} '
                  f'({low:.0%}-{high:.0%}), mean error {report["mean_error"]:.3f} '
                  f'{report["error_unit"]}, RMS jerk {report["rms_jerk"]:.0f}, max boundary '
                  f'jump {report["max_boundary_jump"]:.3f}, kink '
                  f'{report["max_boundary_kink"]:.3f} ({time.perf_counter() - start:.0f} s)',
                  flush=True)
    return rows


def markdown(rows) -> str:
    """The table docs/chunking.md shows: per mode, success (95% CI) at each latency, then the
    largest boundary jump and the RMS jerk at each latency."""
    latencies = sorted({r['latency_ticks'] for r in rows})
    head = ('| mode | ' + ' | '.join(f'success, {d} ticks' for d in latencies) +
            ' | max jump (rad), ' + ' / '.join(map(str, latencies)) + ' ticks | RMS jerk, ' +
            ' / '.join(map(str, latencies)) + ' ticks |')
    lines = [head, '|' + '---|' * (len(latencies) + 3)]
    for mode in dict.fromkeys(r['merge_mode'] for r in rows):
        mine = {r['latency_ticks']: r for r in rows if r['merge_mode'] == mode}
        cells = [f'{mine[d]["success_rate"]:.0%} ({mine[d]["success_ci"][0]:.0%}-'
                 f'{mine[d]["success_ci"][1]:.0%})' for d in latencies]
        jumps = ' / '.join(f'{mine[d]["max_boundary_jump"]:.3f}' for d in latencies)
        jerks = ' / '.join(f'{mine[d]["rms_jerk"]:.0f}' for d in latencies)
        lines.append(f'| `{mode}` | ' + ' | '.join(cells) + f' | {jumps} | {jerks} |')
    return '\n'.join(lines)


def plot(rows, path: str, title: str) -> None:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    panels = (('success_rate', 'success (%, 95% CI)', 100), ('max_boundary_jump',
              'max jump at a chunk boundary (rad)', 1), ('max_boundary_kink',
              'max kink at a chunk boundary (rad)', 1), ('rms_jerk', 'RMS jerk (rad/s^3)', 1))
    fig, axes = plt.subplots(1, len(panels), figsize=(17, 3.8))
    modes = list(dict.fromkeys(r['merge_mode'] for r in rows))
    for m, mode in enumerate(modes):
        mine = [r for r in rows if r['merge_mode'] == mode]
        x = [r['latency_ticks'] + 0.12 * (m - (len(modes) - 1) / 2) for r in mine]
        for ax, (key, _, scale) in zip(axes, panels):
            y = [scale * r[key] for r in mine]
            if key == 'success_rate':
                low = [y_ - 100 * r['success_ci'][0] for y_, r in zip(y, mine)]
                high = [100 * r['success_ci'][1] - y_ for y_, r in zip(y, mine)]
                ax.errorbar(x, y, yerr=[low, high], marker='o', capsize=3, label=mode)
            else:
                ax.plot(x, y, marker='o', label=mode)
    for ax, (key, label, _) in zip(axes, panels):
        ax.set(xlabel='injected latency (ticks)', ylabel=label)
    axes[0].set_ylim(-5, 105)
    axes[1].legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--spec', help='run the spec\'s eager policy (default: the world\'s demo)')
    p.add_argument('--artifact', help='run this artifact instead of a spec')
    p.add_argument('--world', default='viperx_pick_place')
    p.add_argument('--moving', type=float, default=0.05,
                   help='the bin\'s speed (m/s); 0: the static task')
    p.add_argument('--episodes', type=int, default=30)
    p.add_argument('--workers', type=int, default=2, help='local worker processes')
    p.add_argument('--seconds', type=float, help='episode length (default: the world\'s)')
    p.add_argument('--seed', type=int, default=0,
                   help='episode placements (0: those of the static demonstrations, where the '
                        'demo policy can do the task; 1: placements it never saw)')
    p.add_argument('--latencies', type=int, nargs='+', default=[0, 2, 4, 8])
    p.add_argument('--modes', nargs='+', choices=MERGE_CHOICES, help=f'default: {MODES}')
    p.add_argument('--out', default=os.path.join(ROOT, 'bench', 'results',
                                                 'chunk_merge_world.json'))
    args = p.parse_args()
    if args.spec and args.artifact:
        raise SystemExit('give --spec or --artifact, not both')
    path = args.artifact or args.spec or os.path.join(
        ROOT, 'config', 'specs', f'{args.world}_demo.yaml')
    modes = args.modes or [m for m in MODES if not args.artifact or m != 'rtc/guided']
    rows = measure(path, args.world, args.moving, modes, args.latencies, args.episodes,
                   args.workers, args.seed, args.seconds)
    if args.artifact:
        from lamp_ros.runtime import Runtime
        runtime = Runtime.load(args.artifact)
        source = {'artifact_id': runtime.id}
        device = 'cuda' if str(runtime.device).startswith('cuda') else 'cpu'
    else:
        source = {'spec': os.path.relpath(path, ROOT)}
        device = 'cpu'   # the eager pipeline runs on the CPU (build_pipeline's default)
    with open(args.out, 'w', encoding='utf-8') as f:
        json.dump({**source, 'world': args.world, 'moving_speed': args.moving,
                   'episodes': args.episodes, 'seconds': args.seconds, 'seed': args.seed,
                   'rows': rows,
                   'provenance': provenance(device)}, f, indent=1)
    picture = args.out.rsplit('.', 1)[0] + '.png'
    what = source.get('spec') or f'artifact {source["artifact_id"][:12]}'
    plot(rows, picture, f'chunk merge modes under latency: {args.world}, bin at '
         f'{args.moving:g} m/s, {args.episodes} episodes per point, {what}')
    print(markdown(rows))
    print(f'wrote {args.out} and {picture}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
