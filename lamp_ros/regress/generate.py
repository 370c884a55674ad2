"""A regression bag made by the project's own simulated arm and an artifact, without ROS.

The timeline is exact: cameras at 10 Hz (JPEG, small), joint states at 50 Hz, control ticks at
the artifact's rate. At each tick the same ControlEngine as the node (fed the same decoded
messages a replay will read) produces the command, which is written as the node would publish
it and sent to the simulated joints, so the loop is closed. `lamp replay` of such a bag through
the same artifact is exact; through a changed artifact it shows the change.
"""

import cv2
import numpy as np

from lamp_ros.node.engine import ControlEngine
from lamp_ros.observation import DEFAULT_PROMPT
from lamp_ros.regress import topics
from lamp_ros.regress.bag import BagWriter, TYPESTORE
from lamp_ros.sim.dynamics import follow
from lamp_ros.sim.scene import render

EPOCH_NS = 1_800_000_000 * 10**9   # an arbitrary fixed start, so regenerated bags are identical
T = TYPESTORE.types


def _header(t_ns: int, frame: str = ''):
    stamp = T['builtin_interfaces/msg/Time'](sec=t_ns // 10**9, nanosec=t_ns % 10**9)
    return T['std_msgs/msg/Header'](stamp=stamp, frame_id=frame)


def _jpeg(rgb: np.ndarray, quality: int) -> np.ndarray:
    ok, buf = cv2.imencode('.jpg', cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR),
                           [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return np.frombuffer(buf.tobytes(), np.uint8)


def _trajectory(t_ns: int, joints, q, period: float):
    duration = T['builtin_interfaces/msg/Duration'](sec=0, nanosec=int(period * 1e9))
    empty = np.zeros(0, np.float64)
    point = T['trajectory_msgs/msg/JointTrajectoryPoint'](
        positions=np.asarray(q, np.float64), velocities=empty, accelerations=empty,
        effort=empty, time_from_start=duration)
    return T['trajectory_msgs/msg/JointTrajectory'](
        header=_header(0), joint_names=list(joints), points=[point])


def events(seconds: float, rate_hz: float) -> list:
    """(t_ns, kind) in time order; inputs before a tick at the same instant."""
    out = [(k * 100_000_000, 0, 'cameras') for k in range(int(seconds * 10) + 1)]
    out += [(k * 20_000_000, 1, 'joints') for k in range(int(seconds * 50) + 1)]
    out += [(round(k * 1e9 / rate_hz), 2, 'tick')
            for k in range(1, int(seconds * rate_hz) + 1)]
    return [(t, kind) for t, _, kind in sorted(out)]


def generate_bag(artifact: str, out: str, seconds: float = 3.0, size=(128, 96),
                 quality: int = 80, storage: str = 'mcap', prompt: str = DEFAULT_PROMPT) -> dict:
    from lamp_ros.runtime import Runtime
    runtime = Runtime.load(artifact, execution='sync')
    joints = runtime.joint_names
    period = 1.0 / runtime.rate_hz
    engine = ControlEngine(runtime, runtime.camera_slots, joints, prompt, 0.5, 0.25)
    engine.start((EPOCH_NS - round(period * 1e9)) * 1e-9)
    writer = BagWriter(out, storage)
    q = np.zeros(len(joints))
    target = q.copy()
    commands = 0
    for t_rel, kind in events(seconds, runtime.rate_hz):
        t_ns = EPOCH_NS + t_rel
        now = t_ns * 1e-9
        if kind == 'cameras':
            for slot, topic in ((s, topics.camera_topic(s)) for s in runtime.camera_slots):
                rgb = render(slot, size[0], size[1], t_rel * 1e-9, q)
                msg = T[topics.COMPRESSED](header=_header(t_ns, f'{slot}_camera'),
                                           format='jpeg', data=_jpeg(rgb, quality))
                raw = TYPESTORE.serialize_cdr(msg, topics.COMPRESSED)
                writer.write(f'{topic}/compressed', topics.COMPRESSED, t_ns, raw)
                engine.on_image(slot, TYPESTORE.deserialize_cdr(raw, topics.COMPRESSED), now,
                                compressed=True)
        elif kind == 'joints':
            q = follow(q, target, 0.02, 0.15)
            empty = np.zeros(0, np.float64)
            msg = T[topics.JOINT_STATE](header=_header(t_ns), name=list(joints),
                                        position=q.astype(np.float64), velocity=empty,
                                        effort=empty)
            raw = TYPESTORE.serialize_cdr(msg, topics.JOINT_STATE)
            writer.write(topics.JOINTS_TOPIC, topics.JOINT_STATE, t_ns, raw)
            engine.on_joints(TYPESTORE.deserialize_cdr(raw, topics.JOINT_STATE), now)
        else:
            result = engine.tick(now)
            if result.command is not None:
                target = result.command
                writer.write_msg('/vla_policy/joint_trajectory', topics.TRAJECTORY, t_ns,
                                 _trajectory(t_ns, joints, result.command, period))
                commands += 1
    writer.close()
    return {'bag': out, 'messages': writer.count, 'commands': commands,
            'artifact_id': runtime.id}
