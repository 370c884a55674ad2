"""The simulator's task: bring the gripper over the red cube. Where the cube is shows only in
the camera images; the joint state says where the arm is, not where to go.

Each episode places the cube at its own horizontal position (from the episode's seed) and lets
it drift slowly. The gripper's horizontal place in the base camera is set by the first joint
(scene.py: x = 0.5 + 0.3 tanh(q0)), its height by the second. The error is the pixel distance,
in a 224-pixel-wide base camera, between the gripper and the point above the cube where it
should hover. An episode succeeds when the error stays within SUCCESS_PX for the last
SUCCESS_S seconds. The scripted expert solves the task from the cube's true position
(privileged state no policy sees) and moves at the clamp's max step.
"""

from dataclasses import dataclass
import math

import numpy as np

from lamp_ros.sim.scene import gripper_xy

REFERENCE_PX = 224      # the error is measured as if the base camera were 224 pixels wide
HOVER_Y = 0.5           # where the gripper should hover, as a fraction of the image height
SUCCESS_PX = 12.0       # within this many pixels ...
SUCCESS_S = 1.0         # ... for the last second of the episode
CUBE_RANGE = (0.3, 0.7)  # the cube's centre, as a fraction of the image width
DRIFT = 0.04            # amplitude of the cube's slow drift (fraction of the width)
DRIFT_RATE = 0.3        # rad/s


@dataclass(frozen=True)
class ReachTask:
    """One episode of the task: where its cube starts and how its drift is phased."""

    cube_x0: float
    phase: float

    @classmethod
    def episode(cls, seed: int, index: int) -> 'ReachTask':
        rng = np.random.default_rng([seed, index])
        return cls(float(rng.uniform(*CUBE_RANGE)), float(rng.uniform(0, 2 * math.pi)))

    def cube_x(self, t: float) -> float:
        """The cube's centre at time t, as a fraction of the base camera's width."""
        return self.cube_x0 + DRIFT * math.sin(DRIFT_RATE * t + self.phase)

    def error_px(self, t: float, q) -> float:
        """Pixel distance (224-wide base camera) from the gripper to its hover point."""
        x, y = gripper_xy(q)
        return REFERENCE_PX * math.hypot(x - self.cube_x(t), y - HOVER_Y)

    def expert_target(self, t: float, q) -> np.ndarray:
        """The joint positions that put the gripper on its hover point (first two joints;
        the others stay where they are)."""
        target = np.array(q, dtype=np.float64)
        target[0] = math.atanh(np.clip((self.cube_x(t) - 0.5) / 0.3, -0.99, 0.99))
        if len(target) > 2:  # scene.py: y = 0.75 - 0.5 (0.5 + 0.15 tanh(q1) + 0.1 tanh(q3))
            reach = (0.75 - HOVER_Y) / 0.5 - 0.5 - 0.1 * math.tanh(float(target[3]) if len(
                target) > 4 else 0.0)
            target[1] = math.atanh(np.clip(reach / 0.15, -0.99, 0.99))
        return target


def succeeded(errors, rate_hz: float) -> bool:
    """Whether the error stayed within SUCCESS_PX for the last SUCCESS_S seconds."""
    last = max(1, int(round(SUCCESS_S * rate_hz)))
    tail = np.asarray(errors[-last:], dtype=np.float64)
    return len(errors) >= last and bool(np.all(tail <= SUCCESS_PX))
