"""Pictures of the issue-9 bench: where lamp stands against the baselines, and where one
inference's GPU time goes.

    python3 bench/gpu_pi05_plots.py [--report bench/results/gpu_pi05.json] [--trace T.json.gz]

`paths_chart` draws gpu_pi05.json's paths (median bars, p99 ticks, log scale) beside the issue's
9 ms target and the stage-wise roofline. `kernel_timeline` draws a torch-profiler Chrome trace of
one inference (bench/gpu_pi05.py --trace-out, which also writes the trace itself for Perfetto):
every GPU kernel as a bar on its stream's lane, coloured by kernel name for the names that take
the most time, and each name's total. Both read only the files, so the committed results can be
redrawn on a machine without a GPU.
"""

import argparse
import gzip
import json
from collections import defaultdict

TARGET_MS = 9.0          # issue 9's lamp_ms target
TOP_NAMES = 10           # kernel names with a colour of their own; the rest are 'other'
GPU_CATEGORIES = ('kernel', 'gpu_memset', 'gpu_memcpy')


def _pyplot():
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    return plt


def paths_chart(report: dict, path: str) -> None:
    """Median ms of every measured path (p99 as a tick) on a log axis, fastest at the top."""
    plt = _pyplot()
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


def read_trace(path: str) -> dict:
    opener = gzip.open if path.endswith('.gz') else open
    with opener(path, 'rt', encoding='utf-8') as f:
        return json.load(f)


def gpu_events(trace: dict) -> list:
    """The GPU's complete events (kernels, memsets, copies) as (name, stream, start us, us),
    in start order."""
    found = [(e['name'], e.get('args', {}).get('stream', e.get('tid')), float(e['ts']),
              float(e.get('dur', 0.0)))
             for e in trace['traceEvents']
             if e.get('ph') == 'X' and e.get('cat') in GPU_CATEGORIES]
    if not found:
        raise ValueError('the trace holds no GPU kernels (was it taken with CUDA activity?)')
    return sorted(found, key=lambda e: e[2])


def time_by_name(events: list) -> dict:
    """kernel name -> (total us, calls), largest total first."""
    totals = defaultdict(lambda: [0.0, 0])
    for name, _, _, dur in events:
        totals[name][0] += dur
        totals[name][1] += 1
    return dict(sorted(((n, tuple(v)) for n, v in totals.items()), key=lambda kv: -kv[1][0]))


def busy_us(events: list) -> float:
    """How long at least one GPU event ran: the union of their intervals. Less than the sum of
    their durations when streams overlap, or when a kernel under programmatic dependent launch
    starts before the one it waits for has ended (its duration then holds that wait)."""
    total, end = 0.0, float('-inf')
    for _, _, start, dur in events:  # in start order
        if start + dur > end:
            total += start + dur - max(start, end)
            end = start + dur
    return total


def _short(name: str, width: int = 48) -> str:
    return name if len(name) <= width else name[:width - 3] + '...'


def kernel_timeline(trace: dict, path: str, title: str = 'one inference') -> dict:
    """Draw the GPU events of `trace` -> a summary (kernels, span ms, busy ms, top names)."""
    plt = _pyplot()
    events = gpu_events(trace)
    totals = time_by_name(events)
    top = list(totals)[:TOP_NAMES]
    cmap = plt.get_cmap('tab10')
    color = {n: cmap(i % 10) for i, n in enumerate(top)}
    t0 = events[0][2]
    span_ms = (max(s + d for _, _, s, d in events) - t0) / 1e3
    streams = sorted({e[1] for e in events}, key=str)
    lane = {s: i for i, s in enumerate(streams)}
    fig, (ax, bars) = plt.subplots(2, 1, figsize=(15, 2.4 + 0.5 * len(streams) + 4.2),
                                   gridspec_kw={'height_ratios': [1 + 0.5 * len(streams), 4]})
    for name, stream, start, dur in events:
        ax.broken_barh([((start - t0) / 1e3, max(dur, 0.5) / 1e3)],
                       (lane[stream] - 0.4, 0.8), facecolors=color.get(name, '0.7'),
                       edgecolor='none')
    ax.set_yticks(range(len(streams)))
    ax.set_yticklabels([f'stream {s}' for s in streams], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, span_ms)
    ax.set_xlabel('ms since the first kernel')
    busy_ms, sum_ms = busy_us(events) / 1e3, sum(d for *_, d in events) / 1e3
    ax.set_title(f'{title}: {len(events)} GPU events over {span_ms:.2f} ms, the GPU busy '
                 f'{busy_ms:.2f} ms of it; their durations sum to {sum_ms:.2f} ms (streams '
                 f'overlap; a dependent launch starts before the kernel it waits for ends)',
                 fontsize=9)
    shown = top + (['other'] if len(totals) > len(top) else [])
    other = sum(v[0] for n, v in totals.items() if n not in color)
    ms = [totals[n][0] / 1e3 for n in top] + ([other / 1e3] if 'other' in shown else [])
    bars.barh(range(len(shown)), ms, color=[color.get(n, '0.7') for n in shown])
    for i, n in enumerate(shown):
        calls = f', {totals[n][1]} calls' if n in totals else ''
        bars.text(ms[i], i, f' {ms[i]:.2f} ms{calls}', va='center', fontsize=8)
    bars.set_yticks(range(len(shown)))
    bars.set_yticklabels([_short(n) for n in shown], fontsize=8)
    bars.invert_yaxis()
    bars.set_xlabel('kernel time per inference, ms (durations summed per name)')
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return {'gpu_events': len(events), 'span_ms': span_ms, 'busy_ms': busy_ms, 'sum_ms': sum_ms,
            'top_ms': {n: totals[n][0] / 1e3 for n in top}}


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
