"""Time `Runtime.run` of an artifact on one example observation (inference every call).

Usage: python3 scripts/device/time_runtime.py ARTIFACT [--n 200] [--warmup 10]
Prints median / p90 / p99 milliseconds of a full inference tick (host stages included). Any
artifact, on the device it was built for: cuda_tiny.sh's CPU smoke times its CPU artifact.
"""
# smoke: run by cuda_tiny.sh

import argparse
import time

import numpy as np

from lamp_ros.ops.normalize import NormStats
from lamp_ros.policies.pi05.example import example_observation
from lamp_ros.runtime import Runtime
from lamp_ros.policies.pi05.assets import norm_stats_path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('artifact')
    parser.add_argument('--n', type=int, default=200)
    parser.add_argument('--warmup', type=int, default=10)
    args = parser.parse_args()
    runtime = Runtime.load(args.artifact)
    stats = NormStats.load(norm_stats_path())
    obs = example_observation(stats)
    feeds = runtime.feeds(obs, 0.0)
    for _ in range(args.warmup):
        runtime.reset()
        runtime.run(feeds)
    times = []
    for _ in range(args.n):
        runtime.reset()  # every tick infers
        start = time.perf_counter()
        runtime.run(feeds)
        times.append((time.perf_counter() - start) * 1e3)
    t = np.array(times)
    print(f'{args.artifact}: device {runtime.device}, n={args.n}: median {np.median(t):.3f} ms, '
          f'p90 {np.percentile(t, 90):.3f} ms, p99 {np.percentile(t, 99):.3f} ms')


if __name__ == '__main__':
    main()
