"""Soak: drive an artifact's Runtime in async mode at its control rate for minutes; count misses.

Usage: python3 scripts/device/soak.py ARTIFACT [--seconds 120] [--out DIR]

The control loop is paced like the node's timer: tick k is due at start + k * period. A tick
misses its deadline when its command is not out by the next tick's due time (late start plus
compute), which also counts ticks the loop had to skip. Inference runs in the Runtime's worker
thread; every tick after the first chunk must produce a finite command. Writes soak.json
(figures), soak_trace.json (Chrome / Perfetto trace), soak_ticks.png (tick latency and start
lateness over time) and soak_hist.png (histograms) under --out.

Nothing here needs a GPU: full_gpu.sh's CPU smoke soaks its CPU artifact for a few seconds
(SOAK_SECONDS).
"""
# smoke: run by full_gpu.sh

import argparse
import json
import os
import time

import numpy as np

from lamp_ros.provenance import provenance
from lamp_ros.runtime import Runtime
from lamp_ros.runtime.loop import synthetic_observation


def soak(runtime, seconds: float) -> dict:
    obs = synthetic_observation(runtime)
    period = runtime.period
    ticks = int(round(seconds / period))
    began_at, lateness, compute, finite, none = [], [], [], 0, 0
    start = time.perf_counter()
    for k in range(ticks):
        due = start + k * period
        delay = due - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        began = time.perf_counter()
        command = runtime.step(obs, k * period)
        ended = time.perf_counter()
        began_at.append(began)
        lateness.append(began - due)
        compute.append(ended - began)
        if command is None:
            none += 1
        elif np.isfinite(command).all():
            finite += 1
    lateness, compute = np.array(lateness) * 1e3, np.array(compute) * 1e3
    done_by = lateness + compute
    misses = int((done_by[none:] > period * 1e3).sum())  # from the first chunk on
    return {'ticks': ticks, 'rate_hz': 1.0 / period, 'seconds': seconds,
            'ticks_before_first_chunk': none, 'finite_commands': finite,
            'deadline_misses': misses,
            'achieved_rate_hz': (ticks - 1) / (began_at[-1] - began_at[0]),
            'tick_compute_ms': _stats(compute), 'tick_lateness_ms': _stats(lateness),
            'series_ms': {'compute': compute.round(3).tolist(),
                          'lateness': lateness.round(3).tolist()}}


def _stats(x: np.ndarray) -> dict:
    p50, p99 = np.percentile(x, [50, 99])
    return {'p50': float(p50), 'p99': float(p99), 'max': float(x.max())}


def plot(result: dict, profile: dict, out: str) -> None:
    import matplotlib
    matplotlib.use('Agg')
    from matplotlib import pyplot as plt
    compute = np.array(result['series_ms']['compute'])
    lateness = np.array(result['series_ms']['lateness'])
    t = np.arange(compute.size) / result['rate_hz']
    fig, ax = plt.subplots(figsize=(10, 4))
    ax.plot(t, compute, lw=0.6, label='tick compute')
    ax.plot(t, lateness, lw=0.6, label='tick start lateness')
    ax.axhline(1e3 / result['rate_hz'], color='r', ls='--', lw=0.8, label='period')
    ax.set_xlabel('s')
    ax.set_ylabel('ms')
    ax.set_title(f"{result['rate_hz']:.0f} Hz async soak: {result['deadline_misses']} misses "
                 f"in {result['ticks']} ticks")
    ax.legend(loc='upper right')
    fig.tight_layout()
    fig.savefig(os.path.join(out, 'soak_ticks.png'), dpi=120)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    axes[0].hist(compute, bins=60)
    axes[0].set_title('tick compute (ms)')
    inference = profile.get('inference') or {}
    axes[1].hist(lateness, bins=60)
    axes[1].set_title(f"tick lateness (ms); inference p50 {inference.get('p50_ms', 0):.1f} ms")
    fig.tight_layout()
    fig.savefig(os.path.join(out, 'soak_hist.png'), dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('artifact')
    parser.add_argument('--seconds', type=float, default=120.0)
    parser.add_argument('--out', default='.')
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    started = time.perf_counter()
    runtime = Runtime.load(args.artifact, execution='async')
    load_s = time.perf_counter() - started
    print(f'loaded {args.artifact} ({runtime.device}, async) in {load_s:.1f} s', flush=True)
    try:
        result = soak(runtime, args.seconds)
        profile = runtime.profile()
        runtime.write_trace(os.path.join(args.out, 'soak_trace.json'))
    finally:
        runtime.close()
    result.update(load_s=load_s, artifact_id=runtime.id, inference=profile['inference'],
                  gpu=profile['gpu'], runtime_deadline_misses=profile['deadline_misses'],
                  inference_errors=profile['inference_errors'],
                  provenance=provenance('cuda' if runtime.device.startswith('cuda') else 'cpu'))
    plot(result, profile, args.out)
    with open(os.path.join(args.out, 'soak.json'), 'w') as f:
        json.dump(result, f, indent=1)
    summary = {k: v for k, v in result.items() if k != 'series_ms'}
    print(json.dumps(summary, indent=1))


if __name__ == '__main__':
    main()
