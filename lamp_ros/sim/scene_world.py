"""The 2D scene (scene.py, task.py) as an evaluation world: the fast fixture of the unit tests.

Joints follow the last command with a first-order lag at 50 Hz, the cameras render the drawing
of the arm over the episode's cube at the world's camera rate, the task's error is in pixels
and an episode succeeds when the error stayed small for its last second. It has the interface
of the physics worlds (world/env.py) so that one evaluation loop runs both.
"""

import numpy as np

from lamp_ros.sim.dynamics import follow
from lamp_ros.sim.scene import render
from lamp_ros.sim.task import ReachTask, succeeded

JOINT_RATE_HZ = 50.0
CAMERA_RATE_HZ = 10.0
TAU_S = 0.15            # the simulator's joint lag (sim/robot.py)
FRAME = (240, 320)      # the simulated cameras' frames (height, width)


class SceneWorld:
    """The reach task of the 2D scene for a robot with `joints` joints (any names)."""

    name = 'scene2d'
    unit = 'px'
    joint_names = None          # drives any joints
    camera_rate_hz = CAMERA_RATE_HZ
    slots = ('base', 'left_wrist', 'right_wrist')   # the cameras it renders
    default_seconds = 10.0

    def __init__(self, joints: int, seed: int = 0):
        self.joints = joints
        self.seed = seed
        self.task = None

    def reset(self, index: int) -> None:
        self.task = ReachTask.episode(self.seed, index)
        self.q = np.zeros(self.joints)
        self.target = self.q.copy()
        self.t = 0.0

    def advance(self, t: float, target) -> None:
        """The joints move toward `target` until time t."""
        self.target = np.asarray(target, np.float64)
        while self.t + 1.0 / JOINT_RATE_HZ <= t + 1e-9:
            self.t += 1.0 / JOINT_RATE_HZ
            self.q = follow(self.q, self.target, 1.0 / JOINT_RATE_HZ, TAU_S)

    def state(self) -> np.ndarray:
        return self.q.copy()

    def frames(self, slots, t: float) -> dict:
        return {slot: render(slot, FRAME[1], FRAME[0], t, self.q, self.task.cube_x(t))
                for slot in slots}

    def error(self, t: float) -> float:
        return self.task.error_px(t, self.q)

    def succeeded(self, errors, rate_hz: float) -> bool:
        return succeeded(errors, rate_hz)

    def outcome(self, errors, rate_hz: float) -> str:
        from lamp_ros.sim.task import SUCCESS_PX, SUCCESS_S
        held = 'held' if self.succeeded(errors, rate_hz) else 'not held'
        return f'within {SUCCESS_PX:g} px for the last {SUCCESS_S:g} s: {held}'

    def close(self) -> None:
        pass
