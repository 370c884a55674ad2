"""A regression bag made by the project's own simulated arm and an artifact, without ROS.

The timeline is exact: cameras at 10 Hz (JPEG, small), joint states at 50 Hz, control ticks at
the artifact's rate. At each tick the same ControlEngine as the node (fed the same decoded
messages a replay will read) produces the command, which is written as the node would publish
it and sent to the simulated joints, so the loop is closed. With `records` the bag also holds
what the node says about its own work (node/records.py: session, latency and inference rows,
episode state), and with `inference_ticks` > 0 inference is asynchronous as on a robot: every
chunk is merged that many ticks after the tick that started it (a machine of known speed).
`lamp replay` of such a bag through the same artifact is exact; through a changed artifact it
shows the change.
"""

import json

import cv2
import numpy as np

from lamp_ros.node import records
from lamp_ros.node.engine import ControlEngine
from lamp_ros.observation import DEFAULT_PROMPT
from lamp_ros.regress import topics
from lamp_ros.regress.bag import BagWriter, TYPESTORE
from lamp_ros.runtime import episode_state
from lamp_ros.runtime.worker import InferenceResult
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


def _row(values, label: str):
    dim = T['std_msgs/msg/MultiArrayDimension'](label=label, size=len(values),
                                                stride=len(values))
    layout = T['std_msgs/msg/MultiArrayLayout'](dim=[dim], data_offset=0)
    return T[topics.FLOAT_ARRAY](layout=layout, data=np.asarray(values, np.float64))


class DelayedInference:
    """The worker of an asynchronous runtime whose inferences take exactly `ticks` control
    periods: each runs when submitted and is handed over `ticks` ticks later (`tick` counts the
    ticks, the generator advances it; `period` is set once the runtime is loaded)."""

    def __init__(self, infer, ticks: int):
        self._infer, self._ticks = infer, ticks
        self.tick, self.period = 0, 0.0
        self._pending = None

    @property
    def busy(self) -> bool:
        return self._pending is not None and self.tick < self._pending[1]

    def submit(self, feeds: dict, t_obs: float, index: int = 0) -> bool:
        if self.busy:
            return False
        chunk, _ = self._infer(feeds)
        seconds = (self._ticks - 0.5) * self.period
        self._pending = (InferenceResult(chunk, t_obs, None, seconds, index),
                         self.tick + self._ticks)
        return True

    def poll(self):
        if self._pending is None or self.busy:
            return None
        result, self._pending = self._pending[0], None
        return result

    def discard(self) -> None:
        self._pending = None

    def wait_idle(self, timeout=None) -> bool:
        return True

    def close(self) -> None:
        self._pending = None


def events(seconds: float, rate_hz: float) -> list:
    """(t_ns, kind) in time order; inputs before a tick at the same instant."""
    out = [(k * 100_000_000, 0, 'cameras') for k in range(int(seconds * 10) + 1)]
    out += [(k * 20_000_000, 1, 'joints') for k in range(int(seconds * 50) + 1)]
    out += [(round(k * 1e9 / rate_hz), 2, 'tick')
            for k in range(1, int(seconds * rate_hz) + 1)]
    return [(t, kind) for t, _, kind in sorted(out)]


def generate_bag(artifact: str, out: str, seconds: float = 3.0, size=(128, 96),
                 quality: int = 80, storage: str = 'mcap', prompt: str = DEFAULT_PROMPT,
                 records_too: bool = False, inference_ticks: int = 0) -> dict:
    """Write the bag (see the module docstring); `records_too`: the node's own records."""
    from lamp_ros.runtime import Runtime
    workers = []

    def worker(infer):
        workers.append(DelayedInference(infer, inference_ticks))
        return workers[-1]
    runtime = Runtime.load(artifact, execution='async' if inference_ticks else 'sync',
                           worker_factory=worker if inference_ticks else None)
    joints, slots = runtime.joint_names, runtime.camera_slots
    period = 1.0 / runtime.rate_hz
    for w in workers:
        w.period = period
    engine = ControlEngine(runtime, slots, joints, prompt, 0.5, 0.25)
    engine.start((EPOCH_NS - round(period * 1e9)) * 1e-9)
    writer = BagWriter(out, storage)
    if records_too:
        session = {'schema': records.SESSION_SCHEMA, 'node': '/vla_policy',
                   'artifact_id': runtime.id, 'artifact': artifact,
                   'execution': 'async' if inference_ticks else 'sync',
                   'rate_hz': runtime.rate_hz, 'prompt': prompt,
                   'cameras': {s: {'topic': f'{topics.camera_topic(s)}/compressed',
                                   'compressed': True} for s in slots},
                   'joint_states_topic': topics.JOINTS_TOPIC, 'joint_names': list(joints),
                   'overrides': {}, 'max_obs_age_s': 0.5, 'max_skew_s': 0.25,
                   'on_fault': 'hold', 'output': 'joint_trajectory',
                   'topics': {'command': '/vla_policy/joint_trajectory',
                              'latency': topics.LATENCY_TOPIC,
                              'inference': topics.INFERENCE_TOPIC,
                              'episode_state': topics.EPISODE_STATE_TOPIC}}
        writer.write_msg(topics.SESSION_TOPIC, topics.STRING, EPOCH_NS - 10**9,
                         T[topics.STRING](data=json.dumps(session)))
    q = np.zeros(len(joints))
    target = q.copy()
    commands = 0
    for t_rel, kind in events(seconds, runtime.rate_hz):
        t_ns = EPOCH_NS + t_rel
        now = t_ns * 1e-9
        if kind == 'cameras':
            for slot, topic in ((s, topics.camera_topic(s)) for s in slots):
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
            for w in workers:
                w.tick += 1
            result = engine.tick(now)
            if result.command is not None:
                target = result.command
                writer.write_msg('/vla_policy/joint_trajectory', topics.TRAJECTORY, t_ns,
                                 _trajectory(t_ns, joints, result.command, period))
                if records_too:
                    inferred = bool(result.fresh and runtime.last_inferred)
                    values, label = records.latency_row(
                        result, now, engine.t0, commands, inferred,
                        runtime.last_delay if inferred and runtime.rtc else None, slots,
                        result.command)
                    writer.write_msg(topics.LATENCY_TOPIC, topics.FLOAT_ARRAY, t_ns + 1,
                                     _row(values, label))
                commands += 1
            if records_too and result.inference is not None:
                values, label = records.inference_row(result.inference, engine.t0, slots)
                writer.write_msg(topics.INFERENCE_TOPIC, topics.FLOAT_ARRAY, t_ns + 2,
                                 _row(values, label))
                blob = episode_state.to_bytes(episode_state.capture(runtime), {
                    'artifact_id': runtime.id, 'tick_s': repr(now),
                    'episode_start_s': repr(engine.t0),
                    'inference_index': str(result.inference.index)})
                writer.write_msg(topics.EPISODE_STATE_TOPIC, topics.BYTES, t_ns + 3,
                                 T[topics.BYTES](layout=T['std_msgs/msg/MultiArrayLayout'](
                                     dim=[], data_offset=0),
                                     data=np.frombuffer(blob, np.uint8)))
    writer.close()
    runtime.close()
    return {'bag': out, 'messages': writer.count, 'commands': commands,
            'artifact_id': runtime.id}
