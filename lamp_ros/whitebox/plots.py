"""Pictures of a profile, drawn from the Chrome trace events (matplotlib, Agg: no display).

Both read the trace the runtime exports, so what is drawn is exactly what Perfetto would show:
a latency histogram per stage (tick, inference, each group, each timed node) and a timeline of
the events as horizontal bars, one band per thread with one lane per event category.
"""

from collections import defaultdict

import numpy as np

LANES = ('tick', 'inference', 'group', 'gpu', 'node')


def _pyplot():
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
    plt = _pyplot()
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
    plt = _pyplot()
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
