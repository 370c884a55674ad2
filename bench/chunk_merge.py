"""How each chunk merge mode copes with inference latency, in closed loop: the trained demo
policy on the simulator's task (`lamp eval`'s loop), one table for every mode and latency.

    python3 bench/chunk_merge.py [--artifact artifacts/pi05_tiny | --spec SPEC] [--episodes 20]
                                 [--latencies 0 2 4 8] [--out bench/results/chunk_merge_cpu.json]

With `--spec` the spec's eager policy runs every mode; with an artifact, its Runtime runs each
mode by overriding the chunker's merge mode. Real-time chunking (`rtc`) needs an artifact whose
denoise stage takes the committed actions (its spec's merge_mode rtc, as the demo's); such an
artifact runs the other modes too (no delay: plain sampling).

For each merge mode (ops/chunker.py MERGE_CHOICES; by default rtc/guided with --spec only, an
artifact runs the rtc mode it was built for) and injected latency D (each tick sees the
observation of D ticks earlier: the chunk it starts is D ticks late, its first actions already
due), the same episodes (same seed) report success rate, mean error, RMS jerk, and the largest
command jump and kink (sim/evaluate.py) at a chunk boundary. The PNG beside the JSON draws each
against the latency, one line per mode.
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
from lamp_ros.runtime import Runtime  # noqa: E402
from lamp_ros.sim.evaluate import controller_for, evaluate  # noqa: E402

KEYS = ('success_rate', 'mean_error', 'rms_jerk', 'max_boundary_jump', 'max_boundary_kink')


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
                  f'{report["max_boundary_jump"]:.3f}, kink {report["max_boundary_kink"]:.3f} '
                  f'({time.perf_counter() - start:.0f} s)', flush=True)
    return rows


def plot(rows, path: str, title: str) -> None:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    panels = (('success_rate', 'success (%)', 100), ('max_boundary_jump',
              'max jump at a chunk boundary (rad)', 1), ('max_boundary_kink',
              'max kink at a chunk boundary (rad)', 1), ('rms_jerk', 'RMS jerk (rad/s^3)', 1))
    fig, axes = plt.subplots(1, len(panels), figsize=(17, 3.8))
    for mode in dict.fromkeys(r['merge_mode'] for r in rows):
        mine = [r for r in rows if r['merge_mode'] == mode]
        x = [r['latency_ticks'] for r in mine]
        for ax, (key, _, scale) in zip(axes, panels):
            ax.plot(x, [scale * r[key] for r in mine], marker='o', label=mode)
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
    p.add_argument('--artifact', default=os.path.join(ROOT, 'artifacts', 'pi05_tiny'))
    p.add_argument('--spec', help='run the spec\'s eager policy instead')
    p.add_argument('--episodes', type=int, default=20)
    p.add_argument('--seconds', type=float, default=10.0)
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--latencies', type=int, nargs='+', default=[0, 2, 4, 8])
    p.add_argument('--modes', nargs='+', choices=MERGE_CHOICES,
                   help='default: every mode')
    p.add_argument('--out', default=os.path.join(ROOT, 'bench', 'results', 'chunk_merge_cpu.json'))
    args = p.parse_args()
    modes = args.modes or [m for m in MERGE_CHOICES if m != 'rtc' and (
        args.spec or m != 'rtc/guided')]
    rows = measure(args.spec or args.artifact, modes, args.latencies, args.episodes,
                   args.seconds, args.seed)
    runtime = None if args.spec else Runtime.load(args.artifact)
    source = ({'spec': os.path.relpath(args.spec, ROOT)} if args.spec else
              {'artifact_id': runtime.id})
    # the eager pipeline runs on the CPU (build_pipeline's default); an artifact where it loads
    device = 'cuda' if runtime is not None and str(runtime.device).startswith('cuda') else 'cpu'
    with open(args.out, 'w', encoding='utf-8') as f:
        json.dump({**source, 'episodes': args.episodes, 'seconds': args.seconds,
                   'seed': args.seed, 'rows': rows, 'provenance': provenance(device)}, f,
                  indent=1)
    picture = args.out.rsplit('.', 1)[0] + '.png'
    what = source.get('spec') or f'artifact {source["artifact_id"][:12]}'
    plot(rows, picture, f'chunk merge modes under latency: {args.episodes} episodes, {what}')
    print(f'wrote {args.out} and {picture}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
