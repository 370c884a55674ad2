"""A small synthetic recording whose every value is known, so a dataset made from it can be
checked value by value (test/dataset/, scripts/fixtures/make_lerobot_dataset.py).

Timeline (period p = 1 / rate_hz, after `lead` commands that precede every input):
- camera `slot` (index s in `slots`) image k at k p: pixel [y, x, c] = (7 k + 3 x + 5 y + 40 c
  + 17 s) mod 256, lossless (rgb8 Image, or PNG CompressedImage with `compressed`);
- joint state m at m p / 4: joint j at 0.01 m + j;
- command k at (k + 0.6) p: joint j at 0.1 k + j + 0.5 (JointTrajectory, or a
  Float64MultiArray on /vla_policy/commands with `array`).
So frame k pairs command k with image k and joint state 4 k + 2.
A session record with the prompt is written when `prompt` is given.
"""

import json

import cv2
import numpy as np

from lamp_ros.regress import topics
from lamp_ros.regress.bag import BagWriter, TYPESTORE

EPOCH_NS = 1_800_000_000 * 10**9
T = TYPESTORE.types


def image(k: int, s: int, width: int, height: int) -> np.ndarray:
    """Camera s's image k, (H, W, 3) uint8 RGB."""
    y, x, c = np.meshgrid(np.arange(height), np.arange(width), np.arange(3), indexing='ij')
    return ((7 * k + 3 * x + 5 * y + 40 * c + 17 * s) % 256).astype(np.uint8)


def state(m: int, joints: int) -> np.ndarray:
    return 0.01 * m + np.arange(joints, dtype=np.float64)


def action(k: int, joints: int) -> np.ndarray:
    return 0.1 * k + np.arange(joints, dtype=np.float64) + 0.5


def _header(t_ns: int):
    return T['std_msgs/msg/Header'](
        stamp=T['builtin_interfaces/msg/Time'](sec=t_ns // 10**9, nanosec=t_ns % 10**9),
        frame_id='')


def _image_msg(rgb: np.ndarray, t_ns: int, compressed: bool):
    if compressed:
        ok, buf = cv2.imencode('.png', cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
        assert ok
        return T[topics.COMPRESSED](header=_header(t_ns), format='png',
                                    data=np.frombuffer(buf.tobytes(), np.uint8))
    h, w = rgb.shape[:2]
    return T[topics.IMAGE](header=_header(t_ns), height=h, width=w, encoding='rgb8',
                           is_bigendian=0, step=w * 3, data=rgb.reshape(-1).copy())


def _command(q: np.ndarray, joints, array: bool):
    if array:
        layout = T['std_msgs/msg/MultiArrayLayout'](dim=[], data_offset=0)
        return T[topics.FLOAT_ARRAY](layout=layout, data=q)
    empty = np.zeros(0, np.float64)
    point = T['trajectory_msgs/msg/JointTrajectoryPoint'](
        positions=q, velocities=empty, accelerations=empty, effort=empty,
        time_from_start=T['builtin_interfaces/msg/Duration'](sec=0, nanosec=0))
    return T[topics.TRAJECTORY](header=_header(0), joint_names=list(joints), points=[point])


def write_sample_bag(path: str, frames: int = 20, rate_hz: float = 10.0,
                     joints=('shoulder', 'elbow', 'wrist'), slots=('base', 'wrist'),
                     size=(16, 12), prompt: str | None = 'pick up the cube',
                     compressed: bool = False, array: bool = False, lead: int = 0,
                     storage: str = 'mcap') -> dict:
    """Write the bag (see the module docstring); returns what it holds."""
    period_ns = round(1e9 / rate_hz)
    start = EPOCH_NS + lead * period_ns
    command_topic = '/vla_policy/commands' if array else '/vla_policy/joint_trajectory'
    command_type = topics.FLOAT_ARRAY if array else topics.TRAJECTORY
    camera_topic = {s: topics.camera_topic(s) + ('/compressed' if compressed else '')
                    for s in slots}
    events = [(start + k * period_ns, 0, 'image', k) for k in range(frames)]
    events += [(start + m * period_ns // 4, 1, 'joints', m) for m in range(4 * frames)]
    events += [(start + k * period_ns + 6 * period_ns // 10, 2, 'command', k)
               for k in range(frames)]
    events += [(EPOCH_NS + k * period_ns, 2, 'lead', k) for k in range(lead)]
    writer = BagWriter(path, storage)
    if prompt is not None:
        session = {'schema': 'lamp.session/1', 'node': '/vla_policy', 'prompt': prompt,
                   'rate_hz': rate_hz, 'joint_names': list(joints),
                   'cameras': {s: {'topic': camera_topic[s], 'compressed': compressed}
                               for s in slots},
                   'joint_states_topic': topics.JOINTS_TOPIC,
                   'output': 'commands' if array else 'joint_trajectory',
                   'topics': {'command': command_topic}}
        writer.write_msg(topics.SESSION_TOPIC, topics.STRING, EPOCH_NS - 10**9,
                         T[topics.STRING](data=json.dumps(session)))
    empty = np.zeros(0, np.float64)
    for t_ns, _, kind, k in sorted(events):
        if kind == 'image':
            for s, slot in enumerate(slots):
                msg = _image_msg(image(k, s, *size), t_ns, compressed)
                writer.write_msg(camera_topic[slot], topics.COMPRESSED if compressed
                                 else topics.IMAGE, t_ns, msg)
        elif kind == 'joints':
            writer.write_msg(topics.JOINTS_TOPIC, topics.JOINT_STATE, t_ns, T[
                topics.JOINT_STATE](header=_header(t_ns), name=list(joints),
                                    position=state(k, len(joints)), velocity=empty,
                                    effort=empty))
        else:
            q = action(k, len(joints)) if kind == 'command' else np.full(len(joints), -1.0)
            writer.write_msg(command_topic, command_type, t_ns, _command(q, joints, array))
    writer.close()
    return {'bag': path, 'frames': frames, 'lead': lead, 'joints': list(joints),
            'slots': list(slots), 'size': tuple(size), 'prompt': prompt}
