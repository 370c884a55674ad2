"""The control engine: what one tick does with the latest inputs, without ROS.

The node feeds it messages and calls `tick` from its timer; rosbag replay feeds it the bag's
messages and calls `tick` at the recorded command times. Same conversion, same input checks,
same fault handling, so a replay reproduces what the node did.
"""

from dataclasses import dataclass, replace
import time

import numpy as np

from lamp_ros.node import convert
from lamp_ros.node.inputs import InputCache


@dataclass(frozen=True)
class InferenceRecord:
    """One inference as the engine ran it: the tick that started it and the header stamps of
    the inputs it read, the tick its chunk was merged at (or its failure seen), how long it
    took and, for real-time chunking, the delay it was generated for. With these a replay runs
    an asynchronous episode exactly as it went: the same inputs, the chunk merged at the same
    tick, the same latency estimate."""

    index: int             # the episode's nth inference (its flow noise is the nth draw)
    submitted: float       # tick time it started at
    merged: float          # tick time its chunk was merged at
    seconds: float         # its measured duration (the latency estimate's sample)
    delay: int | None      # rtc: the delay in ticks it was generated for
    error: str             # '' or why it failed
    stamps: dict           # header stamp of every input it read: joints and each slot


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
    inference: InferenceRecord | None = None   # the inference whose chunk this tick merged


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
        self._started = {}    # inference index -> (tick, stamps, rtc delay) until merged

    def start(self, now: float) -> None:
        """New episode at time `now`: runtime state reset, no command to hold yet."""
        self.runtime.reset()
        self.t0 = now
        self.last_safe = None
        self._started = {}

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
        merged = self._track_inference(now)
        used = dict(self.inputs.last_stamps)  # the step ran on them, fresh command or not
        if command is None:
            result = replace(self.fault('waiting', 'waiting for the first chunk', stamp,
                                        compute), stamps=used)
        elif not np.isfinite(command).all():
            result = replace(self.fault('error', 'non-finite command from the policy', stamp,
                                        compute), stamps=used)
        else:
            self.last_safe = np.array(command, dtype=np.float64)
            result = TickResult(self.last_safe, True, '', '', stamp, compute,
                                dict(self.inputs.last_stamps), now)
        return replace(result, inference=merged) if merged else result

    def _track_inference(self, now: float) -> InferenceRecord | None:
        """Note the inference this tick started (its tick, inputs and rtc delay); return the
        record of the one whose chunk (or failure) this tick received. In sync execution that
        is the same inference; in async one started ticks earlier."""
        runtime = self.runtime
        if runtime.last_inferred:
            self._started[runtime.inference_count - 1] = (
                now, dict(self.inputs.last_stamps), runtime.last_delay if runtime.rtc else None)
        merged = runtime.last_merged
        if merged is None:
            return None
        tick, stamps, delay = self._started.pop(merged.index, (float('nan'), {}, None))
        return InferenceRecord(merged.index, tick, now, merged.seconds, delay,
                               merged.error or '', stamps)
