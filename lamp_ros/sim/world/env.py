"""A MuJoCo world as an evaluation world: the interface the evaluation loop (sim/evaluate.py)
and the 2D scene (sim/scene_world.py) share.

The episode's cube comes from (seed, index); the task's error is in metres; success is judged
from the physics at the episode's end. `task.expert_target(t, q)` is the scripted expert's
command, from privileged state, for the expert controller.
"""

import numpy as np

from lamp_ros.sim.world.expert import PickPlaceExpert
from lamp_ros.sim.world.physics import MujocoWorld
from lamp_ros.sim.world.pick_place import PickPlaceEpisode
from lamp_ros.sim.world.world import World


class ExpertView:
    """What the expert controller asks of a task: the expert's command at (t, q)."""

    def __init__(self, expert: PickPlaceExpert):
        self.expert = expert

    def expert_target(self, t: float, q) -> np.ndarray:
        return self.expert(t)


class WorldEnv:
    unit = 'm'
    camera_rate_hz = 10.0

    def __init__(self, world: World, seed: int = 0):
        self.world = world
        self.name = world.name
        self.seed = seed
        self.sim = MujocoWorld(world)
        self.joint_names = world.robot.joint_names
        self.joints = len(self.joint_names)
        self.slots = tuple(world.robot.cameras)   # the cameras it renders
        self.default_seconds = world.task.seconds
        self.expert = PickPlaceExpert(self.sim, [j.max_step for j in world.robot.joints])
        self.task = ExpertView(self.expert)
        self.episode = None

    def reset(self, index: int) -> None:
        self.episode = PickPlaceEpisode.draw(self.world.task, self.seed, index)
        self.sim.reset(self.episode)
        self.expert.reset()

    def advance(self, t: float, target) -> None:
        self.sim.command(target)
        self.sim.advance(t)

    def state(self) -> np.ndarray:
        return self.sim.joints()

    def frames(self, slots, t: float) -> dict:
        cameras = self.world.robot.cameras
        return {slot: self.sim.frame(slot, cameras[slot].width, cameras[slot].height)
                for slot in slots if slot in cameras}

    def error(self, t: float) -> float:
        return self.sim.error()

    def succeeded(self, errors, rate_hz: float) -> bool:
        return self.sim.success()

    def outcome(self, errors, rate_hz: float) -> str:
        return self.sim.outcome()

    def close(self) -> None:
        self.sim.close()
