"""The robot a spec drives (`robot:`): joints and their limits, the action space, the cameras.

It is the one description of the embodiment: the clamp takes its limits from it, the artifact's
ABI carries it, the node subscribes and publishes by it, and the simulator is built from it. A
spec names it inline or as `robot: {file: config/robots/NAME.yaml}`; every key is checked and
every error names the field. Joint limits a robot file leaves out come from its URDF (read by
urdf_parser_py, ROS's own parser): lower / upper from `<limit>`, and `max_step` (the largest
change per control tick) from the joint's velocity limit divided by the control rate; values
written in the robot file win.
"""

from dataclasses import dataclass, field
import math
import os

from lamp_ros.spec.build_options import check_keys, read_yaml, SpecError
from lamp_ros.spec.keys import ROBOT_FILE, SPEC_KEYS

ENCODINGS = {'jpeg': 'compressed', 'png': 'compressed', 'rgb8': 'raw', 'bgr8': 'raw',
             'mono8': 'raw'}
ACTION_KINDS = ('absolute', 'delta')


@dataclass(frozen=True)
class RobotJoint:
    name: str
    lower: float
    upper: float
    max_step: float


@dataclass(frozen=True)
class RobotCamera:
    """What the robot publishes for one of the model's camera slots."""

    topic: str
    encoding: str       # jpeg, png: sensor_msgs/CompressedImage; rgb8, bgr8, mono8: Image
    width: int
    height: int

    @property
    def compressed(self) -> bool:
        return ENCODINGS[self.encoding] == 'compressed'


@dataclass(frozen=True)
class Robot:
    name: str
    joints: tuple           # RobotJoint, in action-vector order
    cameras: dict           # model camera slot -> RobotCamera; a slot not listed: masked off
    action: dict = field(default_factory=lambda: {'kind': 'absolute'})
    norm_stats: str = ''    # openpi norm_stats.json layout; '' when the policy brings its own
    urdf: str = ''

    @property
    def joint_names(self) -> tuple:
        return tuple(j.name for j in self.joints)

    @property
    def delta_mask(self) -> tuple | None:
        """Per joint, whether the policy's action is added to the state (openpi's DeltaActions
        convention); None for absolute actions."""
        return tuple(self.action['mask']) if self.action['kind'] == 'delta' else None

    def clamp(self) -> dict:
        """The safety clamp's attrs (ops/clamp.py): the robot's limits and max step."""
        return {'lower': [j.lower for j in self.joints], 'upper': [j.upper for j in self.joints],
                'max_step': [j.max_step for j in self.joints]}

    def to_dict(self) -> dict:
        """Plain data for the artifact's ABI (paths left out: the ABI is what the robot sees)."""
        return {'name': self.name,
                'joints': [{'name': j.name, 'lower': j.lower, 'upper': j.upper,
                            'max_step': j.max_step} for j in self.joints],
                'action': dict(self.action),
                'cameras': {slot: {'topic': c.topic, 'encoding': c.encoding, 'width': c.width,
                                   'height': c.height} for slot, c in self.cameras.items()}}

    @classmethod
    def from_abi(cls, d: dict) -> 'Robot':
        return cls(d['name'], tuple(RobotJoint(**j) for j in d['joints']),
                   {slot: RobotCamera(**c) for slot, c in d['cameras'].items()},
                   dict(d['action']))


def _number(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SpecError(f'{where}: a finite number, got {value!r}')
    return float(value)


def urdf_limits(path: str) -> dict:
    """joint name -> {'lower', 'upper', 'velocity'} from a URDF's <limit> tags (those given)."""
    from urdf_parser_py.urdf import URDF
    try:
        with open(path, encoding='utf-8') as f:
            model = URDF.from_xml_string(f.read())
    except OSError as exc:
        raise SpecError(f'robot.urdf: cannot read {path} ({exc})') from exc
    except Exception as exc:  # the parser raises several types for malformed XML
        raise SpecError(f'robot.urdf: {path} is not a URDF ({exc})') from exc
    out = {}
    for joint in model.joints:
        limit = joint.limit
        values = {} if limit is None else {
            k: float(getattr(limit, k)) for k in ('lower', 'upper', 'velocity')
            if getattr(limit, k, None) is not None}
        if joint.type == 'continuous':  # no position limits
            values.pop('lower', None)
            values.pop('upper', None)
        out[joint.name] = values
    return out


def _joint(d, i: int, urdf: dict | None, urdf_path: str, rate_hz: float) -> RobotJoint:
    where = f'robot.joints[{i}]'
    if not isinstance(d, dict):
        raise SpecError(f'{where}: a mapping with name, lower, upper, max_step, got {d!r}')
    check_keys(d, SPEC_KEYS['robot.joints[]'], where)
    name = d.get('name')
    if not isinstance(name, str) or not name:
        raise SpecError(f'{where}.name: the joint name as /joint_states has it, got {name!r}')
    values = dict(d)
    if urdf is not None and any(k not in d for k in ('lower', 'upper', 'max_step')):
        if name not in urdf:
            raise SpecError(f'{where}.name: {name!r} is not a joint of {urdf_path} (its joints: '
                            f'{", ".join(sorted(urdf))})')
        limits = urdf[name]
        values.setdefault('lower', limits.get('lower'))
        values.setdefault('upper', limits.get('upper'))
        if 'max_step' not in d and limits.get('velocity'):
            values['max_step'] = limits['velocity'] / rate_hz
    for key in ('lower', 'upper', 'max_step'):
        if values.get(key) is None:
            source = f' and {urdf_path} has none' if urdf is not None else ' (or a urdf)'
            raise SpecError(f'{where}.{key}: missing{source}')
    lower = _number(values['lower'], f'{where}.lower')
    upper = _number(values['upper'], f'{where}.upper')
    step = _number(values['max_step'], f'{where}.max_step')
    if lower >= upper:
        raise SpecError(f'{where}: lower {lower} must be below upper {upper} ({name})')
    if step <= 0:
        raise SpecError(f'{where}.max_step: must be > 0, got {step} ({name})')
    return RobotJoint(name, lower, upper, step)


def _camera(d, slot: str) -> RobotCamera:
    where = f'robot.cameras.{slot}'
    if not isinstance(d, dict):
        raise SpecError(f'{where}: a mapping with topic, encoding, width, height, got {d!r}')
    check_keys(d, SPEC_KEYS['robot.cameras.<slot>'], where)
    for key in ('topic', 'encoding', 'width', 'height'):
        if key not in d:
            raise SpecError(f'{where}.{key}: missing')
    topic = d['topic']
    if not isinstance(topic, str) or not topic.startswith('/'):
        raise SpecError(f'{where}.topic: an absolute topic name, got {topic!r}')
    if d['encoding'] not in ENCODINGS:
        raise SpecError(f'{where}.encoding: {d["encoding"]!r}; one of {", ".join(ENCODINGS)}')
    for key in ('width', 'height'):
        if isinstance(d[key], bool) or not isinstance(d[key], int) or d[key] < 1:
            raise SpecError(f'{where}.{key}: pixels, an integer >= 1, got {d[key]!r}')
    return RobotCamera(topic, d['encoding'], d['width'], d['height'])


def _action(d, joints: int) -> dict:
    if not isinstance(d, dict):
        raise SpecError(f'robot.action: {{kind: absolute}} or {{kind: delta, mask: [...]}}, got '
                        f'{d!r}')
    check_keys(d, SPEC_KEYS['robot.action'], 'robot.action')
    kind = d.get('kind', 'absolute')
    if kind not in ACTION_KINDS:
        raise SpecError(f'robot.action.kind: {kind!r}; one of {", ".join(ACTION_KINDS)}')
    if kind == 'absolute':
        if 'mask' in d:
            raise SpecError('robot.action.mask: only for kind delta')
        return {'kind': 'absolute'}
    mask = d.get('mask')
    if not isinstance(mask, list) or not all(isinstance(m, bool) for m in mask):
        raise SpecError(f'robot.action.mask: one true/false per joint (true: the action is '
                        f'added to the state), got {mask!r}')
    if len(mask) != joints:
        raise SpecError(f'robot.action.mask: {len(mask)} values for {joints} joints')
    return {'kind': 'delta', 'mask': list(mask)}


def parse_robot(d, base_dir: str, rate_hz: float) -> Robot:
    """A `robot:` mapping (or `{file: path}`, relative to `base_dir`) -> Robot."""
    if isinstance(d, dict) and set(d) == {ROBOT_FILE}:
        file = d[ROBOT_FILE]
        path = file if os.path.isabs(file) else os.path.normpath(os.path.join(base_dir, file))
        if not os.path.isfile(path):
            where = '' if os.path.isabs(file) else (
                f' ({file} is read relative to the spec\'s folder, {base_dir}: a spec copied '
                f'elsewhere keeps its files with lamp_ros.spec.spec_data, which makes its paths '
                f'absolute)')
            raise SpecError(f'robot.file: no file {path}{where}')
        return parse_robot(read_yaml(path, 'robot.file'), os.path.dirname(os.path.abspath(path)),
                           rate_hz)
    if not isinstance(d, dict):
        raise SpecError(f'robot: a mapping (name, joints, cameras, ...) or {{file: path}}, got '
                        f'{d!r}')
    check_keys(d, SPEC_KEYS['robot'], 'robot')
    name = d.get('name')
    if not isinstance(name, str) or not name:
        raise SpecError(f'robot.name: a name for the robot, got {name!r}')
    joints_in = d.get('joints')
    if not isinstance(joints_in, list) or not joints_in:
        raise SpecError('robot.joints: a list of joints in action-vector order')
    urdf_path = ''
    urdf = None
    if d.get('urdf'):
        urdf_path = os.path.join(base_dir, d['urdf'])
        urdf = urdf_limits(urdf_path)
    joints = tuple(_joint(j, i, urdf, urdf_path, rate_hz) for i, j in enumerate(joints_in))
    names = [j.name for j in joints]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise SpecError(f'robot.joints: {twice} listed twice')
    cameras_in = d.get('cameras') or {}
    if not isinstance(cameras_in, dict):
        raise SpecError(f'robot.cameras: model slot -> {{topic, encoding, width, height}}, got '
                        f'{cameras_in!r}')
    cameras = {slot: _camera(c, slot) for slot, c in cameras_in.items()}
    topics = [c.topic for c in cameras.values()]
    shared = sorted({t for t in topics if topics.count(t) > 1})
    if shared:
        raise SpecError(f'robot.cameras: topic {shared} given to several slots')
    norm_stats = d.get('norm_stats') or ''
    if norm_stats:
        norm_stats = os.path.join(base_dir, norm_stats)
        if not os.path.isfile(norm_stats):
            raise SpecError(f'robot.norm_stats: no file {norm_stats}')
    action = _action(d.get('action', {'kind': 'absolute'}), len(joints))
    return Robot(name, joints, cameras, action, norm_stats, urdf_path)


def check_robot_fits(robot: Robot, interface) -> None:
    """The robot against the interface the policy declares: joint count, camera slots."""
    if len(robot.joints) != len(interface.joint_names):
        raise SpecError(f'robot.joints: {len(robot.joints)} joints {list(robot.joint_names)}; '
                        f'the policy drives {len(interface.joint_names)} '
                        f'{list(interface.joint_names)}')
    unknown = sorted(set(robot.cameras) - set(interface.camera_slots))
    if unknown:
        raise SpecError(f'robot.cameras: {unknown} are not camera slots of the model '
                        f'({", ".join(interface.camera_slots) or "none"})')
