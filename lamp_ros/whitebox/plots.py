"""Pictures of a profile, drawn from the Chrome trace events (matplotlib, Agg: no display).

The first two read the trace the runtime exports, so what is drawn is exactly what Perfetto
would show: a latency histogram per stage (tick, inference, each group, each timed node) and a
timeline of the events as horizontal bars, one band per thread with one lane per event category.
The third draws a GPU's kernels from a torch-profiler trace (whitebox/op_profile.gpu_events): one
lane per CUDA stream, the kernel names that take the most time in colours of their own, and each
name's total beside it.
"""

from collections import defaultdict

import numpy as np

LANES = ('tick', 'inference', 'group', 'gpu', 'node')


def pyplot():
    """matplotlib's pyplot on the Agg backend (files only, no display), imported on first use."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    return plt


def durations_ms(trace: dict) -> dict:
    """event name -> [duration ms], in the order tick, inference, groups, gpu, nodes."""
    found = defaultdict(list)
    for e in trace['traceEvents']:
        if e.get('ph') == 'X':
            found[e['name']].append(e['dur'] / 1e3)
    rank = {lane: i for i, lane in enumerate(LANES)}
    return dict(sorted(found.items(), key=lambda kv: (rank.get(kv[0].split(':')[0], 9), kv[0])))


def write_histogram(trace: dict, path: str) -> None:
    plt = pyplot()
    series = durations_ms(trace)
    cols = 4
    rows = max(1, -(-len(series) // cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 2.6 * rows), squeeze=False)
    for ax, (name, values) in zip(axes.flat, series.items()):
        ax.hist(values, bins=min(30, max(5, len(values) // 2)), color='tab:blue')
        ax.set_title(f'{name}\np50 {np.median(values):.3f} ms, n={len(values)}', fontsize=8)
        ax.set_xlabel('ms', fontsize=7)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(series):]:
        ax.axis('off')
    fig.suptitle('latency per stage')
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def write_timeline(trace: dict, path: str) -> None:
    plt = pyplot()
    events = [e for e in trace['traceEvents'] if e.get('ph') == 'X']
    threads = {e['tid']: e['args']['name'] for e in trace['traceEvents']
               if e.get('ph') == 'M' and e.get('name') == 'thread_name'}
    t0 = min((e['ts'] for e in events), default=0.0)
    lanes = sorted({(e['tid'], e['cat']) for e in events},
                   key=lambda tc: (tc[0], LANES.index(tc[1]) if tc[1] in LANES else 9))
    row = {lane: i for i, lane in enumerate(lanes)}
    names = sorted({e['name'] for e in events})
    cmap = plt.get_cmap('tab20')
    color = {n: cmap(i % 20) for i, n in enumerate(names)}
    fig, ax = plt.subplots(figsize=(14, 1.0 + 0.45 * max(len(lanes), 1)))
    for e in events:
        y = row[(e['tid'], e['cat'])]
        ax.broken_barh([((e['ts'] - t0) / 1e3, e['dur'] / 1e3)], (y - 0.4, 0.8),
                       facecolors=color[e['name']], edgecolor='none')
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([f'{threads.get(tid, tid)}: {cat}' for tid, cat in lanes], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel('ms since the first event')
    groups = [n for n in names if n.startswith('group:')]
    if groups:
        from matplotlib.patches import Patch
        ax.legend(handles=[Patch(color=color[n], label=n) for n in groups], fontsize=7,
                  loc='upper left', bbox_to_anchor=(1.0, 1.0))
    ax.set_title('timeline (trace events per thread)')
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


TOP_KERNELS = 10  # kernel names with a colour of their own in a kernel timeline; the rest grey


def _short(name: str, width: int = 48) -> str:
    return name if len(name) <= width else name[:width - 3] + '...'


def write_kernel_timeline(events: list, path: str, title: str) -> dict:
    """GPU events (name, stream, start us, us) as a timeline and per-name totals -> summary
    (events, span, busy and summed ms, the top names' ms)."""
    from lamp_ros.whitebox.op_profile import busy_us, time_by_name
    plt = pyplot()
    totals = time_by_name(events)
    top = list(totals)[:TOP_KERNELS]
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
                 f'{busy_ms:.2f} ms of it;\ntheir durations sum to {sum_ms:.2f} ms (streams '
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
    bars.set_xlabel('kernel time, ms (durations summed per name)')
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return {'gpu_events': len(events), 'span_ms': span_ms, 'busy_ms': busy_ms, 'sum_ms': sum_ms,
            'top_ms': {n: totals[n][0] / 1e3 for n in top}}
