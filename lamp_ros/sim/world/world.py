"""A world file (`config/worlds/<name>.yaml`, docs/sim.md) read into plain dataclasses.

A world is data: the engine, the robot file it drives (the joints, limits and cameras a policy
sees, as for a spec), where the robot's MuJoCo model comes from (an installed package, never a
copy in this tree) and how the robot's joints map onto it, where each camera renders from, and
the task with its options. Every key is checked; an error names the field.
"""

from dataclasses import dataclass, replace
import os

from lamp_ros.spec.build_options import check_keys, read_yaml, SpecError
from lamp_ros.spec.robot import parse_robot, Robot

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))))
WORLDS_DIR = os.path.join(ROOT, 'config', 'worlds')
ENGINES = ('mujoco',)
TASKS = ('pick_place',)
KEYS = {'': ('name', 'engine', 'robot', 'model', 'rendering', 'cameras', 'task'),
        'model': ('package', 'file', 'remove', 'joint_prefix', 'gripper', 'hand',
                  'grasp_point', 'object', 'home'),
        'gripper': ('joint', 'fingers'),
        'rendering': ('shadows', 'multisample'),
        'camera': ('pos', 'lookat', 'fovy', 'model_camera'),
        'task': ('kind', 'seconds', 'cube', 'bin', 'moving'),
        'cube': ('x', 'y', 'yaw'),
        'bin': ('x', 'y', 'inner', 'wall', 'height'),
        'moving': ('speed', 'travel')}


class WorldError(SpecError):
    """A world file that cannot be used, naming the field."""


@dataclass(frozen=True)
class ModelSource:
    """Where the robot's MuJoCo model comes from and how the robot's joints drive it."""

    package: str            # installed Python package holding the MJCF and meshes
    file: str               # the MJCF, relative to the package
    remove: tuple           # bodies left out (with the actuators of their joints)
    joint_prefix: str       # model joint name = prefix + robot joint name
    gripper_joint: str      # the robot joint that drives the fingers ('' if none)
    fingers: dict           # model finger joint (without prefix) -> sign
    hand: str               # body the grasp point is fixed to
    grasp_point: tuple      # in the hand's frame (m)
    object: str             # the free body the task places
    home: tuple             # robot joint positions at an episode's start


@dataclass(frozen=True)
class CameraPlacement:
    """A fixed camera looking from `pos` at `lookat`, or one of the model's own cameras."""

    pos: tuple = ()
    lookat: tuple = ()
    fovy: float = 45.0
    model_camera: str = ''


@dataclass(frozen=True)
class PickPlaceOptions:
    seconds: float
    cube_x: tuple           # (low, high) of the cube's start (m)
    cube_y: tuple
    cube_yaw: tuple         # (low, high) rad
    bin_xy: tuple           # the bin's centre (m), at rest
    bin_inner: tuple        # inner length along x, y (m)
    bin_wall: float         # wall thickness (m)
    bin_height: float       # wall height (m)
    speed: float = 0.0      # the bin slides along x at this speed (m/s) ...
    travel: float = 0.16    # ... back and forth over this many metres


@dataclass(frozen=True)
class World:
    name: str
    engine: str
    path: str               # the world file
    robot: Robot
    model: ModelSource
    cameras: dict           # robot camera slot -> CameraPlacement
    task: PickPlaceOptions
    shadows: bool = False
    multisample: bool = False

    def moving(self, speed: float) -> 'World':
        """The same world with its bin moving at `speed` m/s (the task's moving variant)."""
        if speed < 0:
            raise WorldError(f'moving speed: at least 0 m/s, got {speed}')
        return replace(self, task=replace(self.task, speed=float(speed)))


def world_path(name_or_path: str) -> str:
    """A world's file: a path as given, or config/worlds/<name>.yaml."""
    if name_or_path.endswith(('.yaml', '.yml')) or os.sep in name_or_path:
        return os.path.abspath(name_or_path)
    return os.path.join(WORLDS_DIR, f'{name_or_path}.yaml')


def world_names() -> list:
    return sorted(f[:-5] for f in os.listdir(WORLDS_DIR) if f.endswith('.yaml'))


def _numbers(value, count: int, where: str) -> tuple:
    if not isinstance(value, (list, tuple)) or len(value) != count or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        raise WorldError(f'{where}: {count} numbers, got {value!r}')
    return tuple(float(v) for v in value)


def _range(value, where: str) -> tuple:
    low, high = _numbers(value, 2, where)
    if low > high:
        raise WorldError(f'{where}: [low, high] with low <= high, got {value!r}')
    return low, high


def _number(value, where: str, minimum: float | None = None) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise WorldError(f'{where}: a number, got {value!r}')
    if minimum is not None and value < minimum:
        raise WorldError(f'{where}: at least {minimum}, got {value}')
    return float(value)


def _text(d: dict, key: str, where: str) -> str:
    value = d.get(key)
    if not isinstance(value, str) or not value:
        raise WorldError(f'{where}.{key}: a name, got {value!r}')
    return value


def _model(d, joints: int) -> ModelSource:
    check_keys(d, KEYS['model'], 'model')
    gripper = d.get('gripper') or {}
    check_keys(gripper, KEYS['gripper'], 'model.gripper')
    fingers = gripper.get('fingers') or {}
    if not isinstance(fingers, dict):
        raise WorldError(f'model.gripper.fingers: finger joint -> sign, got {fingers!r}')
    home = _numbers(d.get('home'), joints, 'model.home')
    remove = d.get('remove') or []
    if not isinstance(remove, list) or not all(isinstance(b, str) for b in remove):
        raise WorldError(f'model.remove: a list of body names, got {remove!r}')
    return ModelSource(
        package=_text(d, 'package', 'model'), file=_text(d, 'file', 'model'),
        remove=tuple(remove), joint_prefix=d.get('joint_prefix') or '',
        gripper_joint=gripper.get('joint') or '',
        fingers={k: _number(v, f'model.gripper.fingers.{k}') for k, v in fingers.items()},
        hand=_text(d, 'hand', 'model'),
        grasp_point=_numbers(d.get('grasp_point'), 3, 'model.grasp_point'),
        object=_text(d, 'object', 'model'), home=home)


def _camera(d, slot: str) -> CameraPlacement:
    where = f'cameras.{slot}'
    check_keys(d, KEYS['camera'], where)
    if d.get('model_camera'):
        if set(d) != {'model_camera'}:
            raise WorldError(f'{where}: model_camera alone (the model places that camera)')
        return CameraPlacement(model_camera=str(d['model_camera']))
    return CameraPlacement(_numbers(d.get('pos'), 3, f'{where}.pos'),
                           _numbers(d.get('lookat'), 3, f'{where}.lookat'),
                           _number(d.get('fovy', 45.0), f'{where}.fovy', 1.0))


def _task(d) -> PickPlaceOptions:
    check_keys(d, KEYS['task'], 'task')
    if d.get('kind') not in TASKS:
        raise WorldError(f'task.kind: one of {list(TASKS)}, got {d.get("kind")!r}')
    cube, box, moving = d.get('cube') or {}, d.get('bin') or {}, d.get('moving') or {}
    check_keys(cube, KEYS['cube'], 'task.cube')
    check_keys(box, KEYS['bin'], 'task.bin')
    check_keys(moving, KEYS['moving'], 'task.moving')
    return PickPlaceOptions(
        seconds=_number(d.get('seconds', 12.0), 'task.seconds', 0.5),
        cube_x=_range(cube.get('x'), 'task.cube.x'), cube_y=_range(cube.get('y'), 'task.cube.y'),
        cube_yaw=_range(cube.get('yaw', [0.0, 0.0]), 'task.cube.yaw'),
        bin_xy=(_number(box.get('x'), 'task.bin.x'), _number(box.get('y'), 'task.bin.y')),
        bin_inner=_numbers(box.get('inner'), 2, 'task.bin.inner'),
        bin_wall=_number(box.get('wall', 0.008), 'task.bin.wall', 0.001),
        bin_height=_number(box.get('height', 0.04), 'task.bin.height', 0.005),
        speed=_number(moving.get('speed', 0.0), 'task.moving.speed', 0.0),
        travel=_number(moving.get('travel', 0.16), 'task.moving.travel', 0.0))


def load_world(name_or_path: str) -> World:
    """The world named `name` (config/worlds/<name>.yaml) or in a file; WorldError if it cannot
    be used."""
    path = world_path(name_or_path)
    if not os.path.isfile(path):
        raise WorldError(f'world {name_or_path!r}: no file {path} (worlds here: '
                         f'{", ".join(world_names())})')
    try:
        return _parse(read_yaml(path, 'world'), path)
    except WorldError:
        raise
    except SpecError as error:   # a robot file's or a key's: said as the world's
        raise WorldError(f'world {path}: {error}') from None


def _parse(d, path: str) -> World:
    check_keys(d, KEYS[''], '')
    if d.get('engine') not in ENGINES:
        raise WorldError(f'engine: one of {list(ENGINES)} (the 2D scene is the unit tests\' '
                         f'fixture, not a world), got {d.get("engine")!r}')
    base = os.path.dirname(path)
    robot_file = d.get('robot')
    if not isinstance(robot_file, str):
        raise WorldError(f'robot: the robot file this world drives, got {robot_file!r}')
    robot = parse_robot({'file': robot_file}, base, 22.0)
    model = _model(d.get('model') or {}, len(robot.joints))
    if model.gripper_joint and model.gripper_joint not in robot.joint_names:
        raise WorldError(f'model.gripper.joint: {model.gripper_joint!r} is not a joint of '
                         f'{robot.name} ({list(robot.joint_names)})')
    cameras_in = d.get('cameras') or {}
    if not isinstance(cameras_in, dict):
        raise WorldError('cameras: robot camera slot -> placement')
    unplaced = sorted(set(robot.cameras) - set(cameras_in))
    if unplaced:
        raise WorldError(f'cameras: the robot\'s camera {unplaced} has no placement')
    rendering = d.get('rendering') or {}
    check_keys(rendering, KEYS['rendering'], 'rendering')
    return World(name=_text(d, 'name', 'world'), engine=d['engine'], path=path, robot=robot,
                 model=model, cameras={slot: _camera(c, slot) for slot, c in cameras_in.items()},
                 task=_task(d.get('task') or {}), shadows=bool(rendering.get('shadows', False)),
                 multisample=bool(rendering.get('multisample', False)))
