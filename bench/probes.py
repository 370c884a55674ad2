"""The frame of a device probe (scripts/device/*_probe.py): named sections measured one after
another, each failure recorded in place of its figures instead of ending the run, and the report
rewritten after every section, so that a call cut short by its time limit still brings back
what it measured."""

import argparse
import json

import torch


def run_sections(description: str, default_out: str, sections) -> dict:
    """Run `sections` ((name, function returning a JSON-able value), ...) on the GPU -> the
    report, also written to --out (default `default_out`)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument('--out', default=default_out)
    parser.add_argument('--only', default='',
                        help='comma-separated section names to run (default: all)')
    args = parser.parse_args()
    only = [n for n in args.only.split(',') if n]
    unknown = sorted(set(only) - {name for name, _ in sections})
    if unknown:
        parser.error(f'--only: no section {unknown} (sections: '
                     f'{", ".join(name for name, _ in sections)})')
    torch.manual_seed(0)
    report = {'gpu': torch.cuda.get_device_name(), 'torch': torch.__version__}
    for name, fn in sections:
        if only and name not in only:
            continue
        print(f'[{name}]', flush=True)
        try:
            report[name] = fn()
        except Exception as exc:
            report[name] = f'failed: {type(exc).__name__}: {exc}'
            print(name, report[name], flush=True)
        save_report(report, args.out)
    return report


def save_report(report: dict, path: str) -> None:
    """Write the report so far to `path` (nothing when it is empty): called after every
    section, so that a run cut short by a time limit keeps what it measured."""
    if path:
        with open(path, 'w', encoding='utf-8') as f:
            json.dump(report, f, indent=1)


def graph_replay_ms(fn, runs: int, warmups: int = 3) -> tuple:
    """fn() captured once into a CUDA graph (after `warmups` calls on a side stream, so that
    lazy compiles and allocations happen outside the capture) and replayed `runs` times ->
    ([ms of each replay, between two CUDA events], what the captured call returned)."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(warmups):
            fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    times = []
    for _ in range(runs):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return times, out
