"""A MuJoCo world running: reset to an episode, follow joint targets, step, render, judge.

The robot is driven the way a real one is: each robot joint's target goes to the model's
position actuator(s) (the gripper's to both fingers, mirrored), clipped to the robot file's
limits, and physics runs at the model's own timestep up to the time asked for. The bin's
platform follows the task's motion every physics step. Frames are rendered only when asked
for (rendering, not physics, is what costs), by one offscreen renderer per frame size.
"""

import numpy as np

from lamp_ros.sim.world.gl import mujoco_module
from lamp_ros.sim.world.mujoco_model import build_model, yaw_quat
from lamp_ros.sim.world.pick_place import (bin_xy, error_m, outcome, PickPlaceEpisode,
                                           succeeded)
from lamp_ros.sim.world.world import World

CUBE_HALF = 0.02   # gym-aloha's box: a 4 cm cube


class MujocoWorld:
    """One world's physics and cameras; `reset` starts an episode."""

    def __init__(self, world: World):
        mujoco = mujoco_module()
        self._mujoco = mujoco
        self.world = world
        self.built = build_model(world)
        self.model = self.built.model
        self.data = mujoco.MjData(self.model)
        self.lower = np.array([j.lower for j in world.robot.joints])
        self.upper = np.array([j.upper for j in world.robot.joints])
        self.episode = None
        self._renderers = {}

    @property
    def time(self) -> float:
        return float(self.data.time)

    def reset(self, episode: PickPlaceEpisode) -> None:
        """The arm at home with its actuators holding it there, the cube at the episode's place,
        the bin where the task puts it at t = 0, and the world settled for a moment."""
        mujoco = self._mujoco
        mujoco.mj_resetData(self.model, self.data)
        self.episode = episode
        home = np.asarray(self.world.model.home, np.float64)
        self._set_joints(home)
        self.command(home)
        adr = self.built.object_qpos
        self.data.qpos[adr:adr + 3] = [*episode.cube_xy, CUBE_HALF]
        self.data.qpos[adr + 3:adr + 7] = yaw_quat(episode.cube_yaw)
        self._place_bin(0.0)
        mujoco.mj_forward(self.model, self.data)

    def _set_joints(self, q: np.ndarray) -> None:
        for value, pairs in zip(q, self.built.actuators):
            for actuator, sign in pairs:
                joint = self.model.actuator_trnid[actuator, 0]
                self.data.qpos[self.model.jnt_qposadr[joint]] = sign * value

    def _place_bin(self, t: float) -> None:
        x, y = bin_xy(self.world.task, self.episode, t)
        self.data.mocap_pos[self.built.bin_mocap] = [x, y, 0.0]

    def command(self, target) -> None:
        """Joint targets in robot units (clipped to the robot's limits) to the actuators."""
        q = np.clip(np.asarray(target, np.float64), self.lower, self.upper)
        for value, pairs in zip(q, self.built.actuators):
            for actuator, sign in pairs:
                self.data.ctrl[actuator] = sign * value

    def advance(self, t: float) -> None:
        """Physics steps until the world's clock reaches t."""
        mujoco = self._mujoco
        dt = self.model.opt.timestep
        while self.data.time + dt <= t + 1e-9:
            self._place_bin(self.data.time + dt)
            mujoco.mj_step(self.model, self.data)

    def joints(self) -> np.ndarray:
        """The robot's joint positions (robot units: the gripper is its first finger)."""
        return self.data.qpos[self.built.joint_qpos].astype(np.float64)

    def cube(self) -> np.ndarray:
        adr = self.built.object_qpos
        return self.data.qpos[adr:adr + 7].copy()

    def bin_centre(self) -> tuple:
        return tuple(self.data.mocap_pos[self.built.bin_mocap][:2])

    def grasp_point(self) -> np.ndarray:
        return self.data.site_xpos[self.built.grasp_site].copy()

    def held(self) -> bool:
        """Whether a finger touches the cube."""
        body = self.built.object_body
        for i in range(self.data.ncon):
            c = self.data.contact[i]
            pair = (int(c.geom1), int(c.geom2))
            bodies = {self.model.geom_bodyid[g] for g in pair}
            if body in bodies and any(g in self.built.finger_geoms for g in pair):
                return True
        return False

    def error(self) -> float:
        return error_m(self.cube()[:3], self.bin_centre())

    def success(self) -> bool:
        return succeeded(self.world.task, self.cube()[:3], self.bin_centre(), self.held())

    def outcome(self) -> str:
        return outcome(self.world.task, self.cube()[:3], self.bin_centre(), self.held())

    def frame(self, slot: str, width: int, height: int) -> np.ndarray:
        """(height, width, 3) uint8 RGB of the robot's camera `slot` now."""
        renderer = self._renderers.get((width, height))
        if renderer is None:
            renderer = self._mujoco.Renderer(self.model, height, width)
            self._renderers[(width, height)] = renderer
        renderer.update_scene(self.data, camera=self.built.cameras[slot])
        return renderer.render()

    def close(self) -> None:
        """Free the renderers' GL contexts now (at interpreter exit their order is undefined)."""
        for renderer in self._renderers.values():
            renderer.close()
        self._renderers.clear()
