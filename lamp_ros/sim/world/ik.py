"""Inverse kinematics over the world's own MuJoCo model: the arm joints that put the grasp
point at a position with the hand pointing straight down and its fingers closing along a
horizontal direction.

Damped least squares on MuJoCo's Jacobians of the grasp site (position and rotation), on a
scratch copy of the state, within the joints' ranges. Used by the scripted expert only, from
privileged state.
"""

import math

import numpy as np

from lamp_ros.sim.world.gl import mujoco_module


def hand_down(closing_yaw: float) -> np.ndarray:
    """The hand's target rotation (columns: its x, y, z axes in the world): x (the approach
    direction) straight down, y (the fingers' closing direction) at `closing_yaw`."""
    x = np.array([0.0, 0.0, -1.0])
    y = np.array([math.cos(closing_yaw), math.sin(closing_yaw), 0.0])
    return np.stack([x, y, np.cross(x, y)], axis=1)


class ArmIK:
    """IK of the first `arm_joints` robot joints of a world (built: mujoco_model.WorldModel)."""

    def __init__(self, built, arm_joints: int, lower, upper, damping: float = 0.05,
                 rotation_weight: float = 0.3):
        mujoco = mujoco_module()
        self._mujoco = mujoco
        self.built = built
        self.model = built.model
        self.data = mujoco.MjData(self.model)
        joint_ids = [self.model.actuator_trnid[pairs[0][0], 0]
                     for pairs in built.actuators[:arm_joints]]
        self.qpos = np.array([self.model.jnt_qposadr[j] for j in joint_ids])
        self.dofs = np.array([self.model.jnt_dofadr[j] for j in joint_ids])
        self.lower = np.asarray(lower, np.float64)[:arm_joints]
        self.upper = np.asarray(upper, np.float64)[:arm_joints]
        self.damping = damping
        self.rotation_weight = rotation_weight
        self._jacp = np.zeros((3, self.model.nv))
        self._jacr = np.zeros((3, self.model.nv))

    def forward(self, q) -> tuple:
        """(grasp point position, hand rotation matrix) at arm joints q."""
        mujoco = self._mujoco
        self.data.qpos[self.qpos] = q
        mujoco.mj_kinematics(self.model, self.data)
        site = self.built.grasp_site
        return self.data.site_xpos[site].copy(), self.data.site_xmat[site].reshape(3, 3).copy()

    def solve(self, q0, position, rotation, iterations: int = 40) -> tuple:
        """(arm joints, position error m) putting the grasp point at `position` with the hand
        at `rotation`, starting from q0."""
        mujoco = self._mujoco
        q = np.clip(np.asarray(q0, np.float64), self.lower, self.upper)
        target = np.asarray(position, np.float64)
        error = np.inf
        for _ in range(iterations):
            pos, rot = self.forward(q)
            e_pos = target - pos
            e_rot = 0.5 * sum(np.cross(rot[:, i], rotation[:, i]) for i in range(3))
            error = float(np.linalg.norm(e_pos))
            if error < 1e-4 and np.linalg.norm(e_rot) < 1e-3:
                break
            mujoco.mj_comPos(self.model, self.data)
            mujoco.mj_jacSite(self.model, self.data, self._jacp, self._jacr,
                              self.built.grasp_site)
            jac = np.vstack([self._jacp[:, self.dofs],
                             self.rotation_weight * self._jacr[:, self.dofs]])
            err = np.concatenate([e_pos, self.rotation_weight * e_rot])
            step = jac.T @ np.linalg.solve(jac @ jac.T + self.damping ** 2 * np.eye(6), err)
            q = np.clip(q + step, self.lower, self.upper)
        return q, error
