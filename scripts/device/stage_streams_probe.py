"""Does a second stream for the action expert shorten the artifact's CUDA graph? Side by side.

Usage: python3 scripts/device/stage_streams_probe.py ARTIFACT [--runs 40] [--rounds 5]
           [--out DIR] [--forms one_stream,side_stream_high_priority]
       python3 scripts/device/stage_streams_probe.py --draw DIR

Builds the artifact's cuda group three times in one process (backends/cuda.py's
CudaGraphRunner; `--forms` picks fewer): captured from one stream; with the `denoise` stage on
a second stream at default priority (backends/stage_streams.py: its first Euler step can run
next to the prefix, layer i as soon as the prefix's layer-i K/V exist); and at high priority,
the runner's default for side stages. The graphs are replayed in turns (`--rounds` rounds of
`--runs` replays each, so drift of the shared machine hits all alike) on the same group
inputs (a synthetic observation through the artifact's host stages). Prints and writes to
--out: per form the median and p99 GPU time of a replay (CUDA events, as `lamp_ms`), whether
its actions equal the one-stream graph's bit for bit, and the stream schedule (operators per
stream, cross-stream waits); plus a Chrome / Perfetto trace of one replay of the one-stream
and the high-priority form (kernels on their streams; moments where no kernel, copy or memset
runs are listed), gzipped, and stage_streams_timeline.png drawn from them (`--draw DIR` draws
it again from traces already written).
"""

import argparse
import gzip
import json
import os

import numpy as np
import torch

from lamp_ros.backends.cuda import CudaGraphRunner
from lamp_ros.runtime import Runtime
from lamp_ros.runtime.loop import synthetic_observation

FORMS = (('one_stream', (), 0), ('side_stream', ('denoise',), 0),
         ('side_stream_high_priority', ('denoise',), -1))
TRACED = ('one_stream', 'side_stream_high_priority')


def group_feeds(path: str):
    """(cuda group, its feeds) from one synthetic inference of the artifact."""
    runtime = Runtime.load(path, execution='sync')
    (group,) = [g for g in runtime.artifact.plan.groups if g.backend == 'cuda']
    captured = {}
    runtime.reset()
    runtime.run(runtime.feeds(synthetic_observation(runtime), 0.0), capture=captured)
    feeds = {name: np.asarray(captured[name]) for name in group.inputs}
    del runtime
    torch.cuda.empty_cache()
    return group, feeds


def trace(runner, feeds, path: str) -> None:
    """A Chrome trace of one replay, gzipped (Perfetto opens .json.gz), without the profiler's
    `traceName` (the path it was written to on the device)."""
    from torch.profiler import profile, ProfilerActivity
    runner.run(feeds)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        runner.run(feeds)
        torch.cuda.synchronize()
    prof.export_chrome_trace(path)
    with open(path) as f:
        events = json.load(f)
    events.pop('traceName', None)
    with gzip.open(path + '.gz', 'wt') as g:
        json.dump(events, g)
    os.remove(path)


GPU_WORK = ('kernel', 'gpu_memset', 'gpu_memcpy')


def work_rows(path: str) -> dict:
    """{'capture': [(start us, duration us)], 'side': [...]} of a trace's kernels, copies and
    memsets: the graph replays the capture stream's work on the stream of its first kernel, the
    side stream's on others (CUDA may spread one captured stream over several)."""
    with gzip.open(path, 'rt') as f:
        work = sorted((e for e in json.load(f)['traceEvents'] if e.get('cat') in GPU_WORK),
                      key=lambda e: e['ts'])
    first = next(e for e in work if e['cat'] == 'kernel')['args'].get('stream')
    t0 = work[0]['ts']
    rows = {'capture': [], 'side': []}
    for e in work:
        row = 'capture' if e['args'].get('stream') == first else 'side'
        rows[row].append((e['ts'] - t0, e['dur']))
    return rows


def idle_gaps(rows: dict, at_least_us: float = 20.0) -> list:
    """[(start us, length us)] where neither stream runs anything for `at_least_us` or more."""
    spans = sorted(span for spans in rows.values() for span in spans)
    gaps, end = [], spans[0][0]
    for start, duration in spans:
        if start - end >= at_least_us:
            gaps.append((round(end, 1), round(start - end, 1)))
        end = max(end, start + duration)
    return gaps


def draw(folder: str) -> str:
    """stage_streams_timeline.png: each form's kernels on their stream over one replay."""
    import matplotlib
    matplotlib.use('Agg')
    from matplotlib import pyplot as plt
    forms = [n for n in TRACED
             if os.path.exists(os.path.join(folder, f'trace_{n}.json.gz'))]
    fig, axes = plt.subplots(len(forms), 1, figsize=(12, 1.6 + 1.3 * len(forms)), sharex=True,
                             squeeze=False)
    for ax, name in zip(axes[:, 0], forms):
        rows = work_rows(os.path.join(folder, f'trace_{name}.json.gz'))
        end = max(s + d for spans in rows.values() for s, d in spans)
        for y, (row, color) in enumerate((('capture', 'tab:blue'), ('side', 'tab:orange'))):
            ax.broken_barh([(s / 1e3, max(d, 1.0) / 1e3) for s, d in rows[row]], (y - 0.4, 0.8),
                           color=color)
        ax.set_yticks([0, 1], ['capture stream\n(vision, prefix)', 'side stream\n(denoise)'])
        ax.set_title(f'{name}: {end / 1e3:.2f} ms of GPU work in one replay (profiled)',
                     fontsize=10)
    axes[-1, 0].set_xlabel('ms from the first kernel')
    fig.tight_layout()
    path = os.path.join(folder, 'stage_streams_timeline.png')
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('artifact', nargs='?')
    parser.add_argument('--runs', type=int, default=40)
    parser.add_argument('--rounds', type=int, default=5)
    parser.add_argument('--out', default='out/stage_streams')
    parser.add_argument('--forms', default='', help='comma-separated subset of FORMS')
    parser.add_argument('--draw', metavar='DIR', help='only draw the PNG from DIR\'s traces')
    args = parser.parse_args()
    if args.draw:
        print(draw(args.draw))
        return
    if not args.artifact:
        parser.error('give the artifact to time (or --draw DIR)')
    if args.forms and 'one_stream' not in args.forms.split(','):
        parser.error('--forms: one_stream is the reference the others are compared with')
    os.makedirs(args.out, exist_ok=True)
    group, feeds = group_feeds(args.artifact)
    print(f'[group {group.name}: {", ".join(group.nodes)}]', flush=True)
    runners, times, report = {}, {}, {'artifact_group': group.name, 'forms': {}}
    for name, side, priority in FORMS:
        if args.forms and name not in args.forms.split(','):
            continue
        runners[name] = CudaGraphRunner(group, args.artifact, 'cuda:0', side_stages=side,
                                        side_priority=priority)
        times[name] = []
        report['forms'][name] = {'streams': runners[name].streams}
        print(f'[{name}] captured; schedule {runners[name].streams}', flush=True)
    reference = runners['one_stream'].run(feeds)
    for name, runner in runners.items():
        for _ in range(5):
            out = runner.run(feeds)
        for key, value in out.items():
            diff = float(np.abs(value - reference[key]).max())
            report['forms'][name]['max_abs_diff_vs_one_stream'] = diff
            report['forms'][name]['identical_to_one_stream'] = bool(
                np.array_equal(value, reference[key]))
    for r in range(args.rounds):
        for name, runner in runners.items():
            for _ in range(args.runs):
                runner.run(feeds)
                times[name].append(runner.last_device_ms)
        print(f'[round {r + 1}/{args.rounds}] ' + ', '.join(
            f'{n} {np.median(t[-args.runs:]):.3f} ms' for n, t in times.items()), flush=True)
    base = float(np.median(times['one_stream']))
    for name, t in times.items():
        t = np.asarray(t)
        form = report['forms'][name]
        form.update(median_ms=float(np.median(t)), p99_ms=float(np.percentile(t, 99)),
                    min_ms=float(t.min()), replays=int(t.size),
                    saved_ms_vs_one_stream=base - float(np.median(t)))
        print(f'{name:28s} median {form["median_ms"]:.3f} ms  p99 {form["p99_ms"]:.3f}  '
              f'saved {form["saved_ms_vs_one_stream"]:+.3f} ms  identical '
              f'{form["identical_to_one_stream"]} (max |diff| '
              f'{form["max_abs_diff_vs_one_stream"]:.2e})', flush=True)
    report['gpu'] = torch.cuda.get_device_name()
    for name in [n for n in TRACED if n in runners]:
        path = os.path.join(args.out, f'trace_{name}.json')
        trace(runners[name], feeds, path)
        gaps = idle_gaps(work_rows(path + '.gz'))
        report['forms'][name]['profiled_idle_gaps_us'] = gaps
        print(f'{name}: idle >= 20 us in the profiled replay at {gaps}', flush=True)
    with open(os.path.join(args.out, 'stage_streams_probe.json'), 'w') as f:
        json.dump(report, f, indent=1)
    print(f'written under {args.out}: {draw(args.out)}', flush=True)


if __name__ == '__main__':
    main()
