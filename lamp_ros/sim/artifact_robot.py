"""The robot `lamp sim` simulates for an artifact.

An artifact whose spec named a robot carries it in its ABI (`abi.robot`): that robot, exactly.
An artifact built without one still says what it drives: its interface (`abi.camera_slots`,
`abi.camera_sizes`, `abi.joint_names`) and the limits of its safety clamp (the `clamp` node of
its graph). The simulator then publishes each camera slot on the topic the node subscribes to
for it (`/camera/<slot>/image_raw`, rgb8, at the policy's typical frame size) and the joints
under the artifact's names, within the clamp's limits (unbounded where the graph has no clamp).
What cannot be simulated (no joints, a slot that is no valid topic name, a clamp of another
length) is refused with the reason, never replaced by some other robot.
"""

import json
import math
import os

from lamp_ros.observation import EXAMPLE_FRAME
from lamp_ros.spec.build_options import SpecError
from lamp_ros.spec.robot import parse_robot, Robot, RobotJoint


def _read(root: str, name: str) -> dict:
    path = os.path.join(root, name)
    try:
        with open(path, encoding='utf-8') as f:
            return json.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(f'artifact {root}: no {name} (not an artifact folder?)') from None
    except (OSError, ValueError) as exc:
        raise ValueError(f'artifact {root}: {name} cannot be read ({exc})') from exc


def robot_of_artifact(root: str) -> tuple:
    """(Robot, where it came from in words) for the artifact folder `root`."""
    manifest = _read(root, 'manifest.json')
    abi = manifest.get('abi') or {}
    if abi.get('robot'):
        return Robot.from_abi(abi['robot']), f'the robot its spec named ({abi["robot"]["name"]})'
    return interface_robot(root, manifest), 'its interface (its spec names no robot)'


def clamp_limits(graph: dict) -> dict | None:
    """The `clamp` node's attrs (lower, upper, max_step per joint) of a graph JSON; None when
    it has none. Refused when several clamps would make the limits ambiguous."""
    clamps = [n.get('attrs') or {} for n in graph.get('nodes', []) if n.get('op') == 'clamp']
    if len(clamps) > 1:
        raise ValueError(f'the graph has {len(clamps)} clamp nodes: which limits the robot has '
                         'is ambiguous')
    return clamps[0] if clamps else None


def interface_robot(root: str, manifest: dict) -> Robot:
    """A robot made from an artifact's interface: its cameras, joints and frame sizes, and the
    limits of its clamp."""
    from rclpy.validate_full_topic_name import validate_full_topic_name
    abi = manifest.get('abi') or {}
    name = manifest.get('name') or os.path.basename(os.path.abspath(root))
    where = f'artifact {root} (no robot section)'
    joints = list(abi.get('joint_names') or [])
    if not joints:
        raise ValueError(f'{where}: its ABI names no joints (abi.joint_names): nothing to '
                         'simulate')
    sizes = abi.get('camera_sizes') or {}
    cameras = {}
    for slot in abi.get('camera_slots') or []:
        topic = f'/camera/{slot}/image_raw'
        try:
            validate_full_topic_name(topic)
        except Exception as exc:  # rclpy's InvalidTopicNameException and friends
            raise ValueError(f'{where}: camera slot {slot!r} gives no valid topic name '
                             f'{topic!r} ({exc})') from exc
        size = sizes.get(slot, EXAMPLE_FRAME)
        if not isinstance(size, (list, tuple)) or len(size) != 2:
            raise ValueError(f'{where}: abi.camera_sizes.{slot}: [height, width], got {size!r}')
        height, width = size
        cameras[slot] = {'topic': topic, 'encoding': 'rgb8', 'width': width, 'height': height}
    graph = _read(root, 'graph.json')
    try:
        clamp = clamp_limits(graph)
    except ValueError as exc:
        raise ValueError(f'{where}: {exc}') from exc
    if clamp is None:  # checked below with finite stand-ins, then unbounded: commands alone
        limits = [(-1.0, 1.0, 1.0)] * len(joints)
    else:
        limits = list(zip(*(_per_joint(clamp, key, len(joints), where)
                            for key in ('lower', 'upper', 'max_step'))))
    try:  # names, limits and cameras checked as a robot file's are
        robot = parse_robot({'name': f'{name} (interface)', 'cameras': cameras, 'joints': [
            {'name': j, 'lower': lo, 'upper': hi, 'max_step': step}
            for j, (lo, hi, step) in zip(joints, limits)]}, root, float(abi.get('rate_hz') or 22))
    except SpecError as exc:
        raise ValueError(f'{where}: {exc}') from exc
    if clamp is None:
        unbounded = tuple(RobotJoint(j, -math.inf, math.inf, math.inf) for j in joints)
        robot = Robot(robot.name, unbounded, robot.cameras, robot.action)
    return robot


def _per_joint(clamp: dict, key: str, joints: int, where: str) -> list:
    values = clamp.get(key)
    if isinstance(values, (int, float)) and not isinstance(values, bool):
        values = [values] * joints   # a scalar max_step applies to every joint (ops/clamp.py)
    if not isinstance(values, list) or len(values) != joints:
        raise ValueError(f'{where}: its clamp has {key} {values!r}, not one value for each of '
                         f'its {joints} joints')
    return values
