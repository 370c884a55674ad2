"""Where a whole inference's time beyond the GPU's goes: the bench's lamp_inference - lamp.

    python3 scripts/device/inference_overhead.py ARTIFACT [--runs 200] [--out FILE]

ARTIFACT is a cuda artifact (pi05_full built on this GPU). Sections, each written to the report
as soon as it is measured (bench/probes.save_report):
  runtime        Runtime.run in sync mode, every tick inferring, as bench/gpu_pi05.py times it:
                 the profiler's p50 and p99 of the inference, of each group and node, and of the
                 GPU; runtime_gc_frozen the same after gc.freeze() (what the ROS node does)
  cuda_run       the cuda group's run() in its steps (the runner's own objects, its own order):
                 filling the pinned inputs (HostInputs.fill, and beside it torch's copy_ of each
                 feed, how it was filled before), the graph.replay() call until it returns, the
                 wait for the end event, the outputs' copies; and the GPU time
  overlap        whole inferences with the groups in plan order and as a tick runs them (the
                 vision's graph launched before the tokenizer and the noise), alternating
  phases         the group captured as one graph (a second runner) against its two graphs,
                 replayed alternately: the GPU time of each and whether their outputs differ
  launch         the same replay timed between two events with the GPU idle before it (as the
                 runtime does) and with the GPU kept busy for ~3 ms first (torch.cuda._sleep), so
                 that the graph's launch is done before the GPU reaches the first event: the
                 difference is the launch latency the event-timed figure includes
  host_groups    the host groups before the cuda group one after another, and at once on a
                 thread pool (they read only the feeds): the wall time of each way
  resize         the base camera's resize-with-pad with OpenCV's default thread pool and with
                 one thread
"""

import argparse
from concurrent.futures import ThreadPoolExecutor
import gc
import json
import time

import cv2
import numpy as np
import torch

from bench.probes import save_report
from lamp_ros.ops.image import preprocess_image
from lamp_ros.runtime import Runtime
from lamp_ros.runtime.loop import synthetic_observation


def pct(values) -> dict:
    v = np.asarray(values, np.float64)
    return {'p50': float(np.median(v)), 'p90': float(np.percentile(v, 90)),
            'p99': float(np.percentile(v, 99))}


def runtime_section(runtime, feeds, runs, freeze_gc=False):
    """Whole ticks, every one inferring; freeze_gc: as the ROS node does after loading (every
    object alive now moved out of the collector's generations), undone afterwards."""
    if freeze_gc:
        gc.collect()
        gc.freeze()
    try:
        for _ in range(5):
            runtime.reset()
            runtime.run(feeds)
        runtime.profiler.reset()
        walls = []
        for _ in range(runs):
            runtime.reset()
            start = time.perf_counter()
            runtime.run(feeds)
            walls.append((time.perf_counter() - start) * 1e3)
    finally:
        if freeze_gc:
            gc.unfreeze()
    profile = runtime.profile()
    out = {'tick_wall_ms': {**pct(walls), 'max': max(walls)},
           'inference_ms': {k: profile['inference'][f'{k}_ms'] for k in ('p50', 'p99', 'max')}}
    for section in ('groups', 'nodes', 'gpu'):
        out[section] = {k: {q: round(v[f'{q}_ms'], 4) for q in ('p50', 'p99')}
                        for k, v in profile[section].items()}
    return out


def cuda_run_section(runner, feeds, runs):
    """runner.run() with a clock between its steps (its code, step for step), and beside its
    filling of the inputs the way it filled them before (torch's copy_ of each feed)."""
    steps = {k: [] for k in ('feeds_in', 'feeds_in_torch_copy', 'replay_call', 'wait',
                             'outputs', 'gpu')}
    for _ in range(runs + 5):
        t0 = time.perf_counter()
        for host, name in zip(runner.host_in.buffers, runner.inputs):
            host.copy_(torch.as_tensor(np.ascontiguousarray(feeds[name])))
        t1 = time.perf_counter()
        runner.host_in.fill(feeds)
        t2 = time.perf_counter()
        runner.events[0].record()
        for graph in runner.graphs:
            graph.replay()
        t3 = time.perf_counter()
        runner.events[1].record()
        runner.events[1].synchronize()
        t4 = time.perf_counter()
        {name: host.numpy().copy() for name, host in zip(runner.outputs, runner.host_out)}
        t5 = time.perf_counter()
        for key, value in zip(('feeds_in_torch_copy', 'feeds_in', 'replay_call', 'wait',
                               'outputs'), (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
            steps[key].append(value * 1e3)
        steps['gpu'].append(runner.events[0].elapsed_time(runner.events[1]))
    return {k: pct(v[5:]) for k, v in steps.items()}


def resize_section(image, runs):
    """The base camera's resize-with-pad (640x480 -> 224) with OpenCV's default thread pool and
    with one thread, interleaved."""
    default = cv2.getNumThreads()
    times = {'default_threads': [], 'one_thread': []}
    try:
        for _ in range(runs):
            for key, threads in (('default_threads', default), ('one_thread', 1)):
                cv2.setNumThreads(threads)
                start = time.perf_counter()
                preprocess_image(image, 224)
                times[key].append((time.perf_counter() - start) * 1e3)
    finally:
        cv2.setNumThreads(default)
    return {'cv2_default_threads': default, **{k: pct(v) for k, v in times.items()}}


def launch_section(runner, runs):
    """Event-timed replays with the GPU idle before them, and with it busy for ~3 ms first."""
    # cycles for ~3 ms: measure the sleep kernel's rate once
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    torch.cuda._sleep(10_000_000)
    b.record()
    b.synchronize()
    cycles = int(10_000_000 * 3.0 / a.elapsed_time(b))
    out = {}
    for name, busy in (('idle_before', False), ('busy_before', True), ('idle_again', False)):
        times = []
        for _ in range(runs):
            torch.cuda.synchronize()
            if busy:
                torch.cuda._sleep(cycles)
            runner.events[0].record()
            for graph in runner.graphs:
                graph.replay()
            runner.events[1].record()
            runner.events[1].synchronize()
            times.append(runner.events[0].elapsed_time(runner.events[1]))
        out[name] = pct(times)
    out['exposed_launch_ms'] = out['idle_before']['p50'] - out['busy_before']['p50']
    return out


def overlap_section(runtime, runner, feeds, runs, block=20):
    """Whole inferences with the groups in plan order and as a tick runs them (the first
    stage's graph launched before the other host groups: runtime/schedule.py), in alternating
    blocks of `block` ticks: the inference's wall time and the GPU's event time of each."""
    out = {}
    for overlap in (False, True):
        out[overlap] = {'inference': [], 'gpu': []}
    for _ in range(max(1, runs // block)):
        for overlap in (False, True):
            runtime.overlap = overlap
            for _ in range(block):
                runtime.reset()
                start = time.perf_counter()
                runtime.run(feeds)
                out[overlap]['inference'].append((time.perf_counter() - start) * 1e3)
                out[overlap]['gpu'].append(runner.last_device_ms)
    runtime.overlap = True
    return {'phases': runner.phases,
            **{('overlapped' if k else 'plan_order'): {q: pct(v[q]) for q in v}
               for k, v in out.items()}}


def phases_section(runtime, group, runner, feeds, runs):
    """The group as one graph (a second runner of the same artifact, captured whole) against
    the two graphs, replayed alternately: GPU time of each, and their outputs compared."""
    from lamp_ros.backends.cuda import CudaGraphRunner
    whole = CudaGraphRunner(group, runtime.artifact.root, runtime.device)
    times = {'one_graph': [], 'two_graphs': []}
    differ = 0
    for _ in range(runs):
        a = whole.run(feeds)
        times['one_graph'].append(whole.last_device_ms)
        b = runner.run(feeds)
        times['two_graphs'].append(runner.last_device_ms)
        differ += sum(int(not np.array_equal(a[k], b[k])) for k in a)
    return {'graphs': [len(whole.graphs), len(runner.graphs)], 'phases': runner.phases,
            'outputs_differ_in_runs': differ, **{k: pct(v) for k, v in times.items()}}


def host_groups_section(runtime, captured, runs):
    """The host groups ahead of the cuda group: in order, then all at once on threads."""
    runners = []
    for group, runner in runtime.inference_runners:
        if group.backend != 'host':
            break
        runners.append((group.name, runner, {v: captured.get(v) for v in runner.inputs}))
    if len(runners) < 2:
        return {'groups': [r[0] for r in runners], 'note': 'fewer than two host groups'}

    def one(item):
        _, runner, feeds = item
        return runner.run(feeds, runtime.state, None)

    pool = ThreadPoolExecutor(len(runners))
    serial, threaded = [], []
    for _ in range(runs):
        start = time.perf_counter()
        for item in runners:
            one(item)
        serial.append((time.perf_counter() - start) * 1e3)
        start = time.perf_counter()
        list(pool.map(one, runners))
        threaded.append((time.perf_counter() - start) * 1e3)
    pool.shutdown()
    return {'groups': [r[0] for r in runners], 'serial_ms': pct(serial),
            'threads_ms': pct(threaded)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('artifact')
    parser.add_argument('--runs', type=int, default=200)
    parser.add_argument('--out', default='inference_overhead.json')
    args = parser.parse_args()
    runtime = Runtime.load(args.artifact, execution='sync', profile_window=args.runs)
    feeds = runtime.feeds(synthetic_observation(runtime), 0.0)
    captured = {}
    runtime.reset()
    runtime.run(feeds, capture=captured)
    (cuda_group, runner), = [(g, r) for g, r in runtime.inference_runners
                             if g.backend == 'cuda']
    report = {'gpu': torch.cuda.get_device_name(), 'artifact_id': runtime.id}
    observation = synthetic_observation(runtime)
    sections = (
        ('runtime', lambda: runtime_section(runtime, feeds, args.runs)),
        ('runtime_gc_frozen', lambda: runtime_section(runtime, feeds, args.runs, True)),
        ('cuda_run', lambda: cuda_run_section(
            runner, {v: captured[v] for v in runner.inputs}, args.runs)),
        ('launch', lambda: launch_section(runner, args.runs)),
        ('overlap', lambda: overlap_section(runtime, runner, feeds, args.runs)),
        ('phases', lambda: phases_section(
            runtime, cuda_group, runner, {v: captured[v] for v in runner.inputs}, args.runs)),
        ('host_groups', lambda: host_groups_section(runtime, captured, args.runs)),
        ('resize', lambda: resize_section(observation['images']['base'], args.runs * 2)),
    )
    for name, fn in sections:
        print(f'[{name}]', flush=True)
        try:
            report[name] = fn()
        except Exception as exc:  # keep the other sections' figures
            report[name] = f'failed: {type(exc).__name__}: {exc}'
        print(json.dumps(report[name], indent=1), flush=True)
        save_report(report, args.out)


if __name__ == '__main__':
    main()
