"""The control engine: what one tick does with the latest inputs, without ROS.

The node feeds it messages and calls `tick` from its timer; rosbag replay feeds it the bag's
messages and calls `tick` at the recorded command times. Same conversion, same input checks,
same fault handling, so a replay reproduces what the node did.
"""

from dataclasses import dataclass
import time

import numpy as np

from lamp_ros.node import convert
from lamp_ros.node.inputs import InputCache


@dataclass(frozen=True)
class TickResult:
    command: object        # (joints,) to publish (fresh or held), or None: publish nothing
    fresh: bool            # a new command from the policy (False: held or none)
    fault: str             # '', 'stale', 'waiting', 'error'
    reason: str
    stamp: float | None    # oldest camera stamp of the observation used
    compute_s: float
    stamps: dict | None = None   # header stamp of every input used: joints and each slot
    now: float | None = None     # the tick time the command was computed for


def skipped_periods(previous: float | None, now: float, period: float) -> int:
    """Control periods that passed between two ticks with no tick of their own.

    A periodic timer whose process was kept off the CPU for more than a period does not run
    the ticks it missed (rclpy's timers skip them): no command went out for those periods, and
    the tick's own duration does not show it. Half a period of slack keeps jitter out."""
    if previous is None or period <= 0:
        return 0
    return max(0, int((now - previous) / period + 0.5) - 1)


class ControlEngine:
    def __init__(self, runtime, slots, joint_names, prompt: str, max_age: float,
                 max_skew: float, on_fault: str = 'hold'):
        self.runtime = runtime
        self.joint_names = list(joint_names)
        self.prompt = prompt
        self.on_fault = on_fault
        self.inputs = InputCache(list(slots), max_age, max_skew)
        self.t0 = 0.0
        self.last_safe = None

    def start(self, now: float) -> None:
        """New episode at time `now`: runtime state reset, no command to hold yet."""
        self.runtime.reset()
        self.t0 = now
        self.last_safe = None

    def on_image(self, slot: str, msg, now: float, compressed: bool = False) -> None:
        try:
            rgb = convert.compressed_to_rgb(msg) if compressed else convert.image_to_rgb(msg)
        except convert.Rejected as exc:
            self.inputs.reject(f'image.{slot}', str(exc))
            return
        self.inputs.put_image(slot, rgb, convert.stamp_seconds(msg.header.stamp), now)

    def on_joints(self, msg, now: float) -> None:
        try:
            q = convert.joint_positions(msg, self.joint_names)
        except convert.Rejected as exc:
            self.inputs.reject('joint_states', str(exc))
            return
        self.inputs.put_joints(q, convert.stamp_seconds(msg.header.stamp), now)

    def fault(self, kind: str, reason: str, stamp=None, compute: float = 0.0) -> TickResult:
        """A tick that could not produce a fresh command: hold (or nothing) and say why."""
        held = self.last_safe if self.on_fault == 'hold' else None
        return TickResult(held, False, kind, reason, stamp, compute)

    def tick(self, now: float) -> TickResult:
        obs, stamp, reason = self.inputs.observation(now, self.prompt)
        if obs is None:
            self.inputs.stale_ticks += 1
            return self.fault('stale', reason)
        start = time.perf_counter()
        try:
            command = self.runtime.step(obs, now - self.t0, stamp - self.t0)
        except ValueError as exc:  # bad observation content: the runtime names the field
            return self.fault('error', f'rejected observation: {exc}', stamp)
        compute = time.perf_counter() - start
        if command is None:
            return self.fault('waiting', 'waiting for the first chunk', stamp, compute)
        if not np.isfinite(command).all():
            return self.fault('error', 'non-finite command from the policy', stamp, compute)
        self.last_safe = np.array(command, dtype=np.float64)
        return TickResult(self.last_safe, True, '', '', stamp, compute,
                          dict(self.inputs.last_stamps), now)
