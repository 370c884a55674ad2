"""Drive a Runtime with synthetic observations: `lamp run`, benchmarks and tests.

`run_ticks` paces ticks at the artifact's rate in real time (like the node's timer) or runs
them back to back, and returns the commands with their tick times.
"""

import time

from lamp_ros.ops.normalize import NormStats
from lamp_ros.policies.example import example_observation


def synthetic_observation(runtime, seed: int = 0) -> dict:
    """An example observation matching the artifact's joints (bundled sim-arm stats)."""
    stats = NormStats.load()
    if tuple(stats.joint_names) != runtime.joint_names:
        raise ValueError(f'synthetic observations are for joints {stats.joint_names}; the '
                         f'artifact drives {runtime.joint_names}')
    return example_observation(stats, seed=seed)


def run_ticks(runtime, ticks: int, realtime: bool = True, observation=None) -> list:
    """-> [(t, command or None)] for `ticks` control ticks at the runtime's rate."""
    observation = observation or synthetic_observation(runtime)
    period = runtime.period
    out = []
    start = time.perf_counter()
    for k in range(ticks):
        due = start + k * period
        if realtime:
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        t = k * period
        out.append((t, runtime.step(observation, t)))
    return out
