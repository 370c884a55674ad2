"""The freshest inputs and their health: cached images per camera slot, the joint state,
their stamps and ages, and counters of what was rejected and why.

The control tick asks `observation(now)` for a consistent observation: every configured camera
and the joint state present, none older than `max_age`, and the camera stamps within
`max_skew` of each other; otherwise it gets the reason (the node holds and reports it).
"""

from collections import Counter
from dataclasses import dataclass
import threading


@dataclass(frozen=True)
class Sample:
    value: object      # np.ndarray
    stamp: float       # header stamp, or receive time when the header has none (seconds)
    received: float


class InputCache:
    def __init__(self, slots, max_age: float, max_skew: float):
        self.slots = tuple(slots)
        self.max_age = max_age
        self.max_skew = max_skew
        self._lock = threading.Lock()
        self._images = {}
        self._joints = None
        self.rejected = Counter()      # reason -> count
        self.last_rejection = ''
        self.stale_ticks = 0
        self.last_stamps = {}          # header stamps of the inputs of the last observation

    def put_image(self, slot: str, image, stamp: float, received: float) -> None:
        with self._lock:
            self._images[slot] = Sample(image, stamp or received, received)

    def put_joints(self, q, stamp: float, received: float) -> None:
        with self._lock:
            self._joints = Sample(q, stamp or received, received)

    def latest_joints(self):
        """The last joint positions received (None before the first): where the robot is."""
        with self._lock:
            return None if self._joints is None else self._joints.value.copy()

    def reject(self, source: str, reason: str) -> None:
        with self._lock:
            self.rejected[source] += 1
            self.last_rejection = f'{source}: {reason}'

    def ages(self, now: float) -> dict:
        """input name -> age in seconds (None when never received)."""
        with self._lock:
            ages = {f'image.{s}': (now - self._images[s].received) if s in self._images
                    else None for s in self.slots}
            ages['joint_states'] = (now - self._joints.received) if self._joints else None
        return ages

    def sizes(self) -> dict:
        """camera slot -> [height, width] of the last frame (any size is accepted: the
        letterbox fits it; the diagnostics say what the robot sends)."""
        with self._lock:
            return {s: list(self._images[s].value.shape[:2]) for s in self.slots
                    if s in self._images}

    def observation(self, now: float, prompt: str):
        """-> (observation dict, oldest input stamp, None) or (None, None, reason)."""
        with self._lock:
            images = dict(self._images)
            joints = self._joints
        missing = [s for s in self.slots if s not in images]
        if missing or joints is None:
            return None, None, f'no input yet from {missing + ([] if joints else ["joints"])}'
        stale = [name for name, sample in [*images.items(), ('joints', joints)]
                 if now - sample.received > self.max_age]
        if stale:
            return None, None, f'stale input (older than {self.max_age:.2f} s): {stale}'
        stamps = [images[s].stamp for s in self.slots]
        if max(stamps) - min(stamps) > self.max_skew:
            return None, None, (f'camera stamps {max(stamps) - min(stamps):.3f} s apart '
                                f'(max_skew_s {self.max_skew})')
        obs = {'images': {s: images[s].value for s in self.slots}, 'state': joints.value,
               'prompt': prompt}
        self.last_stamps = {'joints': joints.stamp, **{s: images[s].stamp for s in self.slots}}
        return obs, min(stamps), None
