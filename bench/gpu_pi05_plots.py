"""Pictures of the issue-9 bench: where lamp stands against the baselines, and where one
inference's GPU time goes.

    python3 bench/gpu_pi05_plots.py [--report bench/results/gpu_pi05.json] [--trace T.json.gz]

`paths_chart` draws gpu_pi05.json's paths (median bars, p99 ticks, log scale) beside the issue's
9 ms target and the stage-wise roofline. `kernel_timeline` draws a torch-profiler Chrome trace of
one inference (bench/gpu_pi05.py --trace-out, which also writes the trace itself for Perfetto)
with the whitebox's kernel timeline (lamp_ros/whitebox/plots.py, as `lamp profile` draws a cuda
group): every GPU kernel as a bar on its stream's lane, coloured by kernel name for the names
that take the most time, and each name's total. Both read only the files, so the committed
results can be redrawn on a machine without a GPU.
"""

import argparse
import json

from lamp_ros.whitebox.op_profile import gpu_events, read_trace
from lamp_ros.whitebox.plots import pyplot, write_kernel_timeline

TARGET_MS = 9.0          # issue 9's lamp_ms target


def paths_chart(report: dict, path: str) -> None:
    """Median ms of every measured path (p99 as a tick) on a log axis, fastest at the top."""
    plt = pyplot()
    median, p99 = report['median_ms'], report['p99_ms']
    names = sorted(median, key=median.get)
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(names) + 1.6))
    colors = ['tab:orange' if n.startswith('lamp') else 'tab:blue' for n in names]
    ax.barh(range(len(names)), [median[n] for n in names], color=colors)
    ax.scatter([p99[n] for n in names], range(len(names)), marker='|', s=200, color='black',
               label='p99', zorder=3)
    for i, n in enumerate(names):
        ax.text(max(median[n], p99[n]) * 1.06, i, f'{median[n]:.2f} ms', va='center',
                fontsize=8)
    ax.axvline(TARGET_MS, color='tab:red', ls='--', label=f'issue target {TARGET_MS:g} ms')
    ax.axvline(report['roofline_ms'], color='tab:green', ls=':',
               label=f"roofline {report['roofline_ms']:.2f} ms")
    ax.set_xscale('log')
    ax.set_xlim(right=3 * max(p99.values()))
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels(names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel('ms per inference (log)')
    ratio = (report['torch_compile_ms'] / report['lamp_ms']
             if report.get('torch_compile_ms') else None)
    ax.set_title(f"{report.get('device', 'GPU')}, artifact {report['artifact_id'][:8]}: lamp "
                 f"{report['lamp_ms']:.2f} ms" + (f', torch.compile / lamp {ratio:.2f}x'
                                                  if ratio else ''), fontsize=9)
    ax.legend(fontsize=8, loc='upper right')
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def kernel_timeline(trace: dict, path: str, title: str = 'one inference') -> dict:
    """Draw the GPU events of a torch-profiler trace (the whitebox's kernel timeline)."""
    return write_kernel_timeline(gpu_events(trace), path, title)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--report', default='bench/results/gpu_pi05.json')
    parser.add_argument('--trace', default='', help='a Chrome trace of gpu_pi05.py --trace-out')
    args = parser.parse_args()
    with open(args.report, encoding='utf-8') as f:
        report = json.load(f)
    chart = args.report.rsplit('.json', 1)[0] + '.png'
    paths_chart(report, chart)
    print(f'paths: {chart}')
    if args.trace:
        png = args.trace.split('.json')[0] + '.png'
        summary = kernel_timeline(read_trace(args.trace), png)
        print(f"timeline: {png} ({summary['gpu_events']} GPU events, "
              f"{summary['span_ms']:.2f} ms span)")


if __name__ == '__main__':
    main()
