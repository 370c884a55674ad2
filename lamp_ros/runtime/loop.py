"""Drive a Runtime with synthetic observations: `lamp run`, benchmarks and tests.

`run_ticks` paces ticks at the artifact's rate in real time (like the node's timer) or runs
them back to back, and returns the commands with their tick times.
"""

import time

import numpy as np

from lamp_ros.observation import PolicyInterface


def synthetic_observation(runtime, seed: int = 0) -> dict:
    """An example observation for the artifact alone, from its declared interface (its ABI):
    a frame per camera slot at its typical size, the prompt if it reads one, and a state
    inside the joint limits of its safety clamp (zeros where it has none)."""
    joints = len(runtime.joint_names)
    low, high = np.zeros(joints), np.zeros(joints)
    for node in runtime.artifact.graph.nodes:
        if node.op == 'clamp' and 'lower' in node.attrs and 'upper' in node.attrs:
            low, high = node.attrs['lower'], node.attrs['upper']
    interface = PolicyInterface(runtime.camera_slots, runtime.joint_names, runtime.prompt,
                                runtime.camera_sizes, tuple(low), tuple(high))
    return interface.example_observation(seed)


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
