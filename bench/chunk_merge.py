"""How each chunk merge mode copes with inference latency, in closed loop: the trained demo
policy on the simulator's task (`lamp eval`'s loop), one table for every mode and latency.

    python3 bench/chunk_merge.py [--artifact artifacts/pi05_tiny | --spec SPEC] [--episodes 20]
                                 [--latencies 0 2 4 8] [--out bench/results/chunk_merge_cpu.json]

With `--spec` the spec's eager policy runs every mode, real-time chunking (`rtc`) included,
which no backend compiles yet; with an artifact, the compiled modes.

For each merge mode (ops/chunker.py MERGE_MODES) and injected latency D (each tick sees the
observation of D ticks earlier: the chunk it starts is D ticks late, its first actions already
due), the same episodes (same seed) report success rate, mean error, RMS jerk and the largest
command jump at a chunk boundary. The PNG beside the JSON draws the boundary jump and the
success rate against the latency, one line per mode. Real-time chunking (issue 53) adds its
modes to this table.
"""

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from lamp_ros.ops.chunker import COMPILED_MERGE_MODES, MERGE_MODES  # noqa: E402
from lamp_ros.runtime import Runtime  # noqa: E402
from lamp_ros.sim.evaluate import controller_for, evaluate  # noqa: E402

KEYS = ('success_rate', 'mean_error', 'rms_jerk', 'max_boundary_jump')


def measure(path: str, modes, latencies, episodes: int, seconds: float, seed: int) -> list:
    """`path`: an artifact, or a spec (its eager pipeline)."""
    rows = []
    for mode in modes:
        control, _, _ = controller_for(path, mode)
        for latency in latencies:
            start = time.perf_counter()
            report = evaluate(control, episodes, seconds, latency, seed)
            rows.append({'merge_mode': mode, 'latency_ticks': latency,
                         **{k: report[k] for k in KEYS}})
            print(f'{mode:18s} latency {latency} ticks: success {report["success_rate"]:.0%}, '
                  f'mean error {report["mean_error"]:.1f} px, RMS jerk '
                  f'{report["rms_jerk"]:.0f}, max boundary jump '
                  f'{report["max_boundary_jump"]:.3f} ({time.perf_counter() - start:.0f} s)',
                  flush=True)
    return rows


def plot(rows, path: str, title: str) -> None:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for mode in dict.fromkeys(r['merge_mode'] for r in rows):
        mine = [r for r in rows if r['merge_mode'] == mode]
        x = [r['latency_ticks'] for r in mine]
        axes[0].plot(x, [r['max_boundary_jump'] for r in mine], marker='o', label=mode)
        axes[1].plot(x, [100 * r['success_rate'] for r in mine], marker='o', label=mode)
    axes[0].set(xlabel='injected latency (ticks)', ylabel='max jump at a chunk boundary (rad)')
    axes[1].set(xlabel='injected latency (ticks)', ylabel='success (%)', ylim=(-5, 105))
    axes[0].legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--artifact', default=os.path.join(ROOT, 'artifacts', 'pi05_tiny'))
    p.add_argument('--spec', help='run the spec\'s eager policy instead (every mode, rtc too)')
    p.add_argument('--episodes', type=int, default=20)
    p.add_argument('--seconds', type=float, default=10.0)
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--latencies', type=int, nargs='+', default=[0, 2, 4, 8])
    p.add_argument('--modes', nargs='+', choices=MERGE_MODES,
                   help='default: every mode the policy runs (with --spec, rtc too)')
    p.add_argument('--out', default=os.path.join(ROOT, 'bench', 'results', 'chunk_merge_cpu.json'))
    args = p.parse_args()
    modes = args.modes or list(MERGE_MODES if args.spec else COMPILED_MERGE_MODES)
    rows = measure(args.spec or args.artifact, modes, args.latencies, args.episodes,
                   args.seconds, args.seed)
    source = ({'spec': os.path.relpath(args.spec, ROOT)} if args.spec else
              {'artifact_id': Runtime.load(args.artifact).id})
    with open(args.out, 'w', encoding='utf-8') as f:
        json.dump({**source, 'episodes': args.episodes, 'seconds': args.seconds,
                   'seed': args.seed, 'rows': rows}, f, indent=1)
    picture = args.out.rsplit('.', 1)[0] + '.png'
    what = source.get('spec') or f'artifact {source["artifact_id"][:12]}'
    plot(rows, picture, f'chunk merge modes under latency: {args.episodes} episodes, {what}')
    print(f'wrote {args.out} and {picture}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
