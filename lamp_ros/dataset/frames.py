"""A recording sampled into frames: one per control command, the command stream as timeline.

A LeRobot frame pairs an observation with the action taken on it. On the robot, the node took
each command from the inputs it had received before it; so each frame here is a command (the
action: the first point of a JointTrajectory, or a Float64MultiArray's data) with the latest
joint state and the latest image of every camera that the bag received before that command
(in the bag's receive order: an input written at the same instant but before it counts). The
inputs come from the topics the node's session record names, else the default topics
(regress/recording.py bag_layout). Commands before the first joint state or before the first
image of any camera have no observation and are left out (counted in `Episode.skipped`).

Images stay as their bag messages until the writer decodes them, one frame at a time: a long
recording's decoded frames would not fit in memory.
"""

from dataclasses import dataclass

import numpy as np

from lamp_ros.node.convert import compressed_to_rgb, image_to_rgb, joint_positions, Rejected
from lamp_ros.regress import topics
from lamp_ros.regress.bag import BagError, BagMessage, read_bag
from lamp_ros.regress.recording import bag_layout, session_of


@dataclass(frozen=True)
class Frame:
    t_ns: int                # receive time of the command
    action: np.ndarray       # float32, joint_names order
    state: np.ndarray        # float32, joint_names order
    images: dict             # slot -> BagMessage of the camera image


@dataclass
class Episode:
    bag: str
    joint_names: list
    cameras: dict            # slot -> (topic, compressed), slot order
    frames: list             # Frame, in time order
    command_topic: str
    command_rate_hz: float   # of all recorded commands (first to last)
    prompt: str | None       # the node's prompt, from its session record
    skipped: int = 0         # commands before every input had arrived

    def image(self, index: int, slot: str) -> np.ndarray:
        """Frame `index`'s image of `slot`, decoded to (H, W, 3) uint8 RGB."""
        message = self.frames[index].images[slot]
        try:
            msg = message.decode()
            return compressed_to_rgb(msg) if self.cameras[slot][1] else image_to_rgb(msg)
        except Rejected as exc:
            raise BagError(f'{self.bag}: {message.topic} at t={message.t_ns * 1e-9:.6f} s: '
                           f'{exc}') from exc


def _joint_names(messages, layout, session) -> list:
    """The command's own names (a JointTrajectory carries them), else the session's, else the
    first joint state's: the order of the action and the state alike."""
    for m in messages:
        if m.topic == layout['command'] and layout['command_type'] == topics.TRAJECTORY:
            names = list(m.decode().joint_names)
            if names:
                return names
            break
    if session and session.get('joint_names'):
        return list(session['joint_names'])
    first = next(m for m in messages if m.topic == layout['joints'])
    return list(first.decode().name)


def _action(message: BagMessage, layout, joint_names) -> np.ndarray | None:
    msg = message.decode()
    positions = topics.command_positions(msg, layout['command_type'])
    if positions is None:
        return None
    if layout['command_type'] == topics.TRAJECTORY and list(msg.joint_names) != joint_names:
        by_name = dict(zip(msg.joint_names, positions))
        if set(by_name) != set(joint_names):
            raise BagError(f'{message.topic} at t={message.t_ns * 1e-9:.6f} s: joints '
                           f'{list(msg.joint_names)}, earlier commands {joint_names}')
        positions = [by_name[j] for j in joint_names]
    if len(positions) != len(joint_names):
        raise BagError(f'{message.topic} at t={message.t_ns * 1e-9:.6f} s: {len(positions)} '
                       f'positions for the {len(joint_names)} joints {joint_names}')
    return np.asarray(positions, np.float32)


def read_episode(bag: str) -> Episode:
    """The bag's frames (see the module docstring); BagError naming what is missing."""
    messages = read_bag(bag)
    if not messages:
        raise BagError(f'{bag}: the bag holds no messages')
    session = session_of(messages)
    layout = bag_layout(messages, None, session)
    if layout['command'] is None:
        wanted = sorted({*topics.COMMAND_TOPICS,
                         *filter(None, [((session or {}).get('topics') or {}).get('command')])})
        raise BagError(f'{bag}: no command topic ({" or ".join(wanted)}); a dataset frame is '
                       f'one command, so a bag without commands has none. Topics: '
                       f'{sorted({m.topic for m in messages})}')
    joint_names = _joint_names(messages, layout, session)
    slot_of = {topic: slot for slot, (topic, _) in layout['cameras'].items()}
    latest_images, latest_joints = {}, None
    frames, skipped, command_times = [], 0, []
    for m in messages:
        if m.topic in slot_of:
            latest_images[slot_of[m.topic]] = m
        elif m.topic == layout['joints']:
            latest_joints = m
        elif m.topic == layout['command']:
            command_times.append(m.t_ns)
            action = _action(m, layout, joint_names)
            if action is None:
                continue
            if latest_joints is None or len(latest_images) < len(slot_of):
                skipped += 1
                continue
            try:
                state = joint_positions(latest_joints.decode(), joint_names)
            except Rejected as exc:
                raise BagError(f'{bag}: {latest_joints.topic} at t='
                               f'{latest_joints.t_ns * 1e-9:.6f} s: {exc}') from exc
            frames.append(Frame(m.t_ns, action, state.astype(np.float32), dict(latest_images)))
    if not frames:
        raise BagError(f'{bag}: none of its {len(command_times)} commands on '
                       f'{layout["command"]} came after a joint state and an image of every '
                       f'camera {sorted(slot_of)}: no frame to write')
    span = (command_times[-1] - command_times[0]) * 1e-9
    rate = (len(command_times) - 1) / span if span > 0 else 0.0
    return Episode(bag, joint_names, dict(layout['cameras']), frames, layout['command'], rate,
                   (session or {}).get('prompt'), skipped)
