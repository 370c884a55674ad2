"""Observations from a rosbag2 recording (`lamp record`, or the robot's own), as the `.npz`
files a precision plan calibrates on (`precision.calibration: {source: npz, path: ...}`,
compiler/precision_plan.py).

An observation is made at each joint-state message once every camera has been seen: the
newest frame of each camera, the joint positions in the artifact's joint order, and the prompt
given. Of those, `samples` are taken evenly spaced over the recording, so a calibration set
covers the whole episode rather than its first second. Frames are decoded as the node decodes
them (node/convert.py).
"""

import os

import numpy as np

from lamp_ros.node.convert import compressed_to_rgb, image_to_rgb, joint_positions, Rejected
from lamp_ros.regress import topics
from lamp_ros.regress.bag import BagError, read_bag
from lamp_ros.regress.recording import bag_layout


def bag_observations(bag: str, camera_slots, joint_names, prompt: str | None,
                     samples: int) -> list:
    """Up to `samples` observations from the bag, evenly spaced in its time order."""
    if samples < 1:
        raise ValueError(f'samples: must be >= 1, got {samples}')
    messages = read_bag(bag)
    layout = bag_layout(messages, list(camera_slots))
    slot_of = {topic: (slot, compressed) for slot, (topic, compressed)
               in layout['cameras'].items()}
    candidates, frames = [], {}
    for message in messages:  # pick first, decode later: only the chosen ones
        if message.topic in slot_of:
            frames[slot_of[message.topic][0]] = message
        elif message.topic == topics.JOINTS_TOPIC and len(frames) == len(slot_of):
            candidates.append((message, dict(frames)))
    if not candidates:
        raise BagError(f'{bag}: no joint state after a frame of every camera '
                       f'({", ".join(camera_slots)})')
    picks = np.unique(np.linspace(0, len(candidates) - 1, min(samples, len(candidates)))
                      .round().astype(int))
    out = []
    for i in picks:
        joints, seen = candidates[i]
        try:
            images = {slot: (compressed_to_rgb if slot_of[m.topic][1] else image_to_rgb)(
                m.decode()) for slot, m in seen.items()}
            state = joint_positions(joints.decode(), joint_names).astype(np.float32)
        except Rejected as exc:
            raise BagError(f'{bag}: the message at {joints.t_ns} ns: {exc}') from exc
        out.append({'images': images, 'state': state,
                    **({'prompt': prompt} if prompt is not None else {})})
    return out


def write_npz(observations, folder: str) -> list:
    """One `NNNN.npz` per observation (arrays `state`, `images.<slot>`, `prompt`) -> paths."""
    os.makedirs(folder, exist_ok=True)
    paths = []
    for i, obs in enumerate(observations):
        path = os.path.join(folder, f'{i:04d}.npz')
        arrays = {'state': obs['state'], **{f'images.{s}': img
                                            for s, img in obs['images'].items()}}
        if 'prompt' in obs:
            arrays['prompt'] = np.array(obs['prompt'])
        np.savez_compressed(path, **arrays)
        paths.append(path)
    return paths
