"""The scripted expert of the pick-and-place task, from privileged state (where the cube and the
bin truly are): above the cube, down, close, lift, over the bin, down, open, up.

Every tick it solves the arm's inverse kinematics (ik.py) for the current phase's waypoint
and moves its joint targets toward the solution by at most the robot's max step, exactly as the
robot's clamp would limit a policy. Phases end on what the physics shows (the grasp point at
its waypoint, the cube lifted with the hand), not on a schedule; a grasp that slipped starts
over from above the cube. The hand points straight down and closes across two faces of the
cube, whichever pair needs the least wrist rotation.
"""

import math

import numpy as np

from lamp_ros.sim.world.ik import ArmIK, hand_down
from lamp_ros.sim.world.physics import CUBE_HALF

CARRY_Z = 0.14        # grasp point height while moving over the table (m)
ABOVE = 0.09          # above the cube before going down to it (m)
# the grasp point this far below the cube's centre (m): above it, so that the fingertips (14 mm
# below the grasp point) stay clear of the table
GRASP_DEPTH = -0.004
RELEASE_ABOVE = 0.05  # the cube's centre this far above the bin's floor when let go (m)
REACHED = 0.012       # a waypoint is reached within this distance (m)
ALIGNED = 0.005       # above the cube within this distance (m) ...
ALIGNED_RAD = 0.05    # ... and the hand's rotation within this angle, before going down
CLOSE_S = 0.6         # time to close or open the gripper (s)
PHASES = ('approach', 'descend', 'close', 'lift', 'carry', 'lower', 'release', 'retreat')


def closing_yaw(cube_yaw: float, reach_yaw: float) -> float:
    """The fingers' closing direction: across a pair of the cube's faces, the pair closest to
    perpendicular to the arm's reach (least wrist rotation)."""
    natural = reach_yaw + math.pi / 2
    candidates = [cube_yaw + k * math.pi / 2 for k in range(-4, 5)]
    return min(candidates, key=lambda c: abs(math.remainder(c - natural, math.pi)))


class PickPlaceExpert:
    """Joint targets for a MujocoWorld (physics.py), one per control tick."""

    def __init__(self, world, max_step):
        self.world = world
        robot = world.world.robot
        self.arm = len(robot.joints) - 1
        self.gripper_open = robot.joints[-1].upper
        self.gripper_closed = robot.joints[-1].lower
        self.ik = ArmIK(world.built, self.arm, world.lower, world.upper)
        self.max_step = np.broadcast_to(np.asarray(max_step, np.float64), (self.arm + 1,))
        self.reset()

    def reset(self) -> None:
        self.phase = 'approach'
        self.since = None        # when the current phase began (s)
        self.last = None         # the last command
        self.solution = None     # the last IK solution: the next one starts from it
        self.yaw = None          # the closing direction, fixed per grasp

    def _enter(self, phase: str, t: float) -> None:
        self.phase, self.since = phase, t

    def _waypoint(self, cube, bin_centre) -> tuple:
        """(grasp point position, gripper opening) the current phase aims at."""
        opened, closed = self.gripper_open, self.gripper_closed
        above_bin = (bin_centre[0], bin_centre[1], CARRY_Z)
        bin_task = self.world.world.task
        return {
            'approach': ((cube[0], cube[1], cube[2] + ABOVE), opened),
            'descend': ((cube[0], cube[1], cube[2] - GRASP_DEPTH), opened),
            'close': ((cube[0], cube[1], cube[2] - GRASP_DEPTH), closed),
            'lift': ((cube[0], cube[1], CARRY_Z), closed),
            'carry': (above_bin, closed),
            'lower': ((bin_centre[0], bin_centre[1], bin_task.bin_wall + CUBE_HALF
                       + RELEASE_ABOVE - GRASP_DEPTH), closed),
            'release': ((bin_centre[0], bin_centre[1], bin_task.bin_wall + CUBE_HALF
                         + RELEASE_ABOVE - GRASP_DEPTH), opened),
            'retreat': (above_bin, opened),
        }[self.phase]

    def _advance_phase(self, t: float, grasp, cube, waypoint) -> None:
        distance = float(np.linalg.norm(np.asarray(waypoint) - grasp))
        elapsed = t - self.since
        phase = self.phase
        if phase == 'approach' and distance < ALIGNED and self._aligned():
            self._enter('descend', t)
        elif phase == 'descend' and (distance < REACHED / 2 or elapsed > 2.0):
            self._enter('close', t)
        elif phase == 'close' and elapsed > CLOSE_S:
            self._enter('lift', t)
        elif phase in ('lift', 'carry', 'lower') and cube[2] < CUBE_HALF + 0.01 and \
                grasp[2] > cube[2] + 0.04:
            self.yaw = None          # the cube slipped out: start over above it
            self._enter('approach', t)
        elif phase == 'lift' and distance < 2 * REACHED:
            self._enter('carry', t)
        elif phase == 'carry' and math.hypot(*(np.asarray(waypoint[:2]) - grasp[:2])) < REACHED:
            self._enter('lower', t)
        elif phase == 'lower' and distance < REACHED:
            self._enter('release', t)
        elif phase == 'release' and elapsed > CLOSE_S:
            self._enter('retreat', t)

    def _aligned(self) -> bool:
        """The hand points down and closes along the chosen direction (within ALIGNED_RAD)."""
        world = self.world
        rot = world.data.site_xmat[world.built.grasp_site].reshape(3, 3)
        target = hand_down(self.yaw)
        error = 0.5 * sum(np.cross(rot[:, i], target[:, i]) for i in range(3))
        return float(np.linalg.norm(error)) < ALIGNED_RAD

    def _base(self) -> np.ndarray:
        world = self.world
        return world.data.xpos[world.model.body_rootid[world.model.site_bodyid[
            world.built.grasp_site]]]

    def _nominal(self, waypoint) -> np.ndarray:
        """Where the IK starts an episode: facing the waypoint, elbow up, forearm unrolled,
        wrist pitched down (the branch of solutions a top-down grasp stays on)."""
        base = self._base()
        q = np.zeros(self.arm)
        q[0] = math.atan2(waypoint[1] - base[1], waypoint[0] - base[0])
        q[4] = 1.2
        return np.clip(q, self.ik.lower, self.ik.upper)

    def _closing_yaw(self, cube_pose) -> float:
        w, z = cube_pose[3], cube_pose[6]
        base = self._base()
        reach = math.atan2(cube_pose[1] - base[1], cube_pose[0] - base[0])
        return closing_yaw(2 * math.atan2(z, w), reach)

    def __call__(self, t: float) -> np.ndarray:
        """The command at time t (robot joint targets)."""
        world = self.world
        q = world.joints()
        if self.since is None:
            self.since = t
        cube_pose = world.cube()
        cube = cube_pose[:3]
        bin_centre = world.bin_centre()
        grasp = world.grasp_point()
        waypoint, _ = self._waypoint(cube, bin_centre)
        self._advance_phase(t, grasp, cube, waypoint)
        if self.yaw is None:
            self.yaw = self._closing_yaw(cube_pose)
        waypoint, grip = self._waypoint(cube, bin_centre)
        start = q if self.last is None else self.last
        if self.solution is None:
            self.solution = self._nominal(waypoint)
        self.solution, _ = self.ik.solve(self.solution, waypoint, hand_down(self.yaw))
        arm = self.solution
        target = np.concatenate([arm, [grip]])
        step = np.clip(target - start, -self.max_step, self.max_step)
        self.last = start + step
        return self.last.copy()
