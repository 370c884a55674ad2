"""A world's MuJoCo model, built from the published MJCF of the installed package that ships it.

The package's model is read as it is published (its kinematics, joint ranges, position
actuators, contact parameters and meshes); the world only removes what it leaves out (another
arm), adds what its task needs (a bin on a kinematic platform, a site at the grasp point) and
its own camera placements, and turns shadows and multisampling off when it says so: with
software rendering they cost ten times the frame time. The robot file's joints are checked
against the model: each must exist, be driven by a position actuator, and keep within the
model's range, so a robot file and a world cannot silently disagree.
"""

from dataclasses import dataclass
import importlib.util
import math
import os

import numpy as np

from lamp_ros.sim.world.gl import mujoco_module
from lamp_ros.sim.world.world import World, WorldError

GRASP_SITE = 'lamp_grasp_point'
BIN_BODY = 'lamp_bin'
CAMERA_PREFIX = 'lamp_'
BIN_RGBA = (0.2, 0.45, 0.85, 1.0)
FLOOR_BELOW_TABLE = 0.75   # m


@dataclass(frozen=True)
class WorldModel:
    """The compiled model and where the robot, the task's objects and the cameras live in it."""

    model: object            # mujoco.MjModel
    joint_qpos: np.ndarray   # qpos address of each robot joint (the gripper: its first finger)
    actuators: tuple         # per robot joint: ((actuator id, sign), ...) it drives
    object_qpos: int         # qpos address of the object's free joint (xyz, quat)
    object_body: int
    bin_mocap: int           # mocap index of the bin's platform
    grasp_site: int
    cameras: dict            # robot camera slot -> MuJoCo camera id
    finger_geoms: frozenset  # geoms of the hand's fingers (contact with the object = held)


def model_file(world: World) -> str:
    """The MJCF inside the installed package; WorldError saying how to install it if absent."""
    spec = importlib.util.find_spec(world.model.package)
    if spec is None or not spec.submodule_search_locations:
        raise WorldError(f'model.package: {world.model.package!r} is not installed (it publishes '
                         f'the robot model of world {world.name}; scripts/run.sh installs it '
                         f'from requirements.txt)')
    path = os.path.join(list(spec.submodule_search_locations)[0], world.model.file)
    if not os.path.isfile(path):
        raise WorldError(f'model.file: {world.model.package} has no {world.model.file}')
    return path


def _lookat_axes(pos, lookat) -> list:
    """MuJoCo camera xyaxes looking from pos at lookat (image up as close to +y as it can)."""
    forward = np.asarray(lookat, float) - np.asarray(pos, float)
    forward /= np.linalg.norm(forward)
    up_hint = np.array([0.0, 1.0, 0.0]) if abs(forward[1]) < 0.9 else np.array([0.0, 0.0, 1.0])
    right = np.cross(forward, up_hint)
    right /= np.linalg.norm(right)
    up = np.cross(right, forward)
    return [*right, *up]


def _subtree_joints(body) -> set:
    mujoco = mujoco_module()
    return {j.name for j in body.find_all(mujoco.mjtObj.mjOBJ_JOINT)}


def _add_bin(spec, world: World) -> None:
    """The bin: a floor and four walls on a kinematic (mocap) platform the task can move."""
    task = world.task
    (lx, ly), wall, height = task.bin_inner, task.bin_wall, task.bin_height
    body = spec.worldbody.add_body(name=BIN_BODY, mocap=True,
                                   pos=[task.bin_xy[0], task.bin_xy[1], 0.0])
    floor = wall / 2
    parts = [('floor', [0, 0, floor], [lx / 2 + wall, ly / 2 + wall, floor])]
    for name, sign in (('x_low', -1), ('x_high', 1)):
        parts.append((name, [sign * (lx / 2 + wall / 2), 0, height / 2],
                      [wall / 2, ly / 2 + wall, height / 2]))
    for name, sign in (('y_low', -1), ('y_high', 1)):
        parts.append((name, [0, sign * (ly / 2 + wall / 2), height / 2],
                      [lx / 2, wall / 2, height / 2]))
    mujoco = mujoco_module()
    for name, pos, size in parts:
        body.add_geom(name=f'{BIN_BODY}/{name}', type=mujoco.mjtGeom.mjGEOM_BOX, pos=pos,
                      size=size, rgba=list(BIN_RGBA))


def build_model(world: World) -> WorldModel:
    """Compile the world's model and find the robot's joints, actuators, object, bin, cameras."""
    mujoco = mujoco_module()
    source = world.model
    spec = mujoco.MjSpec.from_file(model_file(world))
    removed_joints = set()
    for name in source.remove:
        body = spec.body(name)
        if body is None:
            raise WorldError(f'model.remove: the model has no body {name!r}')
        removed_joints |= _subtree_joints(body)
        spec.delete(body)
    for actuator in list(spec.actuators):
        if actuator.target in removed_joints:
            spec.delete(actuator)
    for key in list(spec.keys):   # the model's keyframes size qpos for what was removed
        spec.delete(key)
    hand = spec.body(source.hand)
    if hand is None:
        raise WorldError(f'model.hand: the model has no body {source.hand!r}')
    hand.add_site(name=GRASP_SITE, pos=list(source.grasp_point), size=[0.004, 0, 0],
                  rgba=[0, 1, 0, 0])
    _add_bin(spec, world)
    # a floor under the table (the published scene has none): a cube knocked off lands there
    spec.worldbody.add_geom(name='lamp_floor', type=mujoco.mjtGeom.mjGEOM_PLANE,
                            pos=[0, 0, -FLOOR_BELOW_TABLE], size=[3, 3, 0.1],
                            rgba=[0.35, 0.33, 0.3, 1])
    for slot, camera in world.cameras.items():
        if not camera.model_camera:
            spec.worldbody.add_camera(name=CAMERA_PREFIX + slot, pos=list(camera.pos),
                                      xyaxes=_lookat_axes(camera.pos, camera.lookat),
                                      fovy=camera.fovy)
    if not world.shadows:
        spec.visual.quality.shadowsize = 0
        for light in spec.lights:
            light.castshadow = False
    if not world.multisample:
        spec.visual.quality.offsamples = 0
    model = spec.compile()
    return _locate(world, model)


def _joint_id(model, name: str, what: str) -> int:
    mujoco = mujoco_module()
    index = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
    if index < 0:
        raise WorldError(f'{what}: the model has no joint {name!r}')
    return index


def _locate(world: World, model) -> WorldModel:
    mujoco = mujoco_module()
    source = world.model
    position_actuators = {}   # joint id -> actuator id
    for a in range(model.nu):
        if model.actuator_trntype[a] == mujoco.mjtTrn.mjTRN_JOINT and \
                model.actuator_biastype[a] == mujoco.mjtBias.mjBIAS_AFFINE:
            position_actuators[int(model.actuator_trnid[a, 0])] = a
    qpos, actuators = [], []
    for joint in world.robot.joints:
        if joint.name == source.gripper_joint:
            driven = [(source.joint_prefix + f, s) for f, s in source.fingers.items()]
        else:
            driven = [(source.joint_prefix + joint.name, 1.0)]
        pairs = []
        for name, sign in driven:
            j = _joint_id(model, name, f'robot joint {joint.name}')
            if j not in position_actuators:
                raise WorldError(f'robot joint {joint.name}: model joint {name!r} has no '
                                 f'position actuator')
            low, high = sorted((sign * model.jnt_range[j, 0], sign * model.jnt_range[j, 1]))
            if model.jnt_limited[j] and (joint.lower < low - 1e-4 or joint.upper > high + 1e-4):
                raise WorldError(f'robot joint {joint.name}: limits [{joint.lower}, '
                                 f'{joint.upper}] exceed model joint {name!r}\'s range '
                                 f'[{low:.5g}, {high:.5g}]')
            pairs.append((position_actuators[j], sign))
        qpos.append(model.jnt_qposadr[_joint_id(model, driven[0][0], joint.name)])
        actuators.append(tuple(pairs))
    body = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, source.object)
    if body < 0:
        raise WorldError(f'model.object: the model has no body {source.object!r}')
    joint = model.body_jntadr[body]
    if joint < 0 or model.jnt_type[joint] != mujoco.mjtJoint.mjJNT_FREE:
        raise WorldError(f'model.object: body {source.object!r} is not free to move')
    cameras = {}
    for slot, camera in world.cameras.items():
        name = camera.model_camera or CAMERA_PREFIX + slot
        cameras[slot] = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, name)
        if cameras[slot] < 0:
            raise WorldError(f'cameras.{slot}: the model has no camera {name!r}')
    hand = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, source.hand)
    fingers = frozenset(
        g for g in range(model.ngeom)
        if _descends(model, model.geom_bodyid[g], hand) and model.body_jntnum[
            model.geom_bodyid[g]] and model.jnt_type[model.body_jntadr[model.geom_bodyid[g]]]
        == mujoco.mjtJoint.mjJNT_SLIDE)
    bin_body = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, BIN_BODY)
    return WorldModel(model=model, joint_qpos=np.asarray(qpos), actuators=tuple(actuators),
                      object_qpos=int(model.jnt_qposadr[joint]), object_body=body,
                      bin_mocap=int(model.body_mocapid[bin_body]),
                      grasp_site=mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, GRASP_SITE),
                      cameras=cameras, finger_geoms=fingers)


def _descends(model, body: int, ancestor: int) -> bool:
    while body > 0:
        if body == ancestor:
            return True
        body = model.body_parentid[body]
    return False


def yaw_quat(yaw: float) -> np.ndarray:
    """(w, x, y, z) of a rotation by `yaw` about z."""
    return np.array([math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)])
