"""A LeRobot dataset as training samples of a chunking policy: sample i is frame i's
observation and the chunk of the `horizon` actions from frame i on.

Past an episode's end the chunk repeats the episode's last action (the robot holds where the
demonstration ended), so every frame is a sample and no chunk runs into the next episode.
Images stay PNG bytes until a sample is asked for, unless `image_size` is given: then every
frame is decoded once and letterboxed to that size with lamp's own operator (ops/image.py), the
operator the deployed pipeline runs on it, so a policy that letterboxes to that size sees the
same pixels in training and on the robot.
"""

from dataclasses import dataclass

import numpy as np

from lamp_ros.dataset.reader import Dataset
from lamp_ros.ops.image import preprocess_image

IMAGE_PREFIX = 'observation.images.'


def active_frames(actions: np.ndarray, episodes: list, keep_idle: int | None) -> np.ndarray:
    """Indices of the frames kept: all, or per episode those up to `keep_idle` frames after
    its last change of command."""
    if keep_idle is None:
        return np.arange(len(actions))
    kept = []
    for row in episodes:
        start, stop = row['dataset_from_index'], row['dataset_to_index']
        moved = np.flatnonzero(np.abs(np.diff(actions[start:stop], axis=0)).max(axis=1) > 0)
        last = start + (moved[-1] + 1 if len(moved) else 0)
        kept.append(np.arange(start, min(stop, last + keep_idle + 1)))
    return np.concatenate(kept)


def chunk_indices(episodes: list, horizon: int) -> np.ndarray:
    """(frames, horizon) frame index of each chunk's actions, clipped to its episode's end."""
    rows = []
    for row in episodes:
        start, stop = row['dataset_from_index'], row['dataset_to_index']
        frames = np.arange(start, stop)
        rows.append(np.minimum(frames[:, None] + np.arange(horizon)[None], stop - 1))
    return np.concatenate(rows)


@dataclass
class ChunkSamples:
    """What `scripts/train_demo_policy.py` trains on (the interface of sim/demonstrations.py's
    Demonstrations: len, q, actions, observation(i))."""

    q: np.ndarray            # (N, J) observation.state
    actions: np.ndarray      # (N, horizon, J) the chunk of commands from each frame on
    episode: np.ndarray      # (N,) episode index of each frame
    slots: tuple             # camera slots, from the observation.images.<slot> features
    prompts: list            # (N,) each frame's task text
    dataset: Dataset
    frames: np.ndarray       # (N,) the dataset frame of each sample
    images: dict | None = None   # slot -> (N, S, S, 3) uint8 when decoded up front

    def __len__(self) -> int:
        return len(self.q)

    def image(self, i: int, slot: str) -> np.ndarray:
        if self.images is not None:
            return self.images[slot][i]
        return self.dataset.image(int(self.frames[i]), IMAGE_PREFIX + slot)

    def observation(self, i: int) -> dict:
        """Frame i as a policy sees it on the robot: camera images by slot, state, prompt."""
        return {'images': {slot: self.image(i, slot) for slot in self.slots},
                'state': self.q[i].astype(np.float32), 'prompt': self.prompts[i]}


def chunk_samples(dataset: Dataset, horizon: int, image_size: int | None = None,
                  keep_idle: int | None = None, progress=None) -> ChunkSamples:
    """`dataset`'s frames as samples with `horizon`-action chunks (the still end of each
    episode cut to `keep_idle` frames, when given); `image_size`: decode and letterbox every
    image now (progress(done, total) is called while it does)."""
    if 'action' not in dataset.columns or 'observation.state' not in dataset.columns:
        raise ValueError(f'{dataset.root}: needs the features action and observation.state')
    slots = tuple(k[len(IMAGE_PREFIX):] for k in dataset.image_keys if k.startswith(IMAGE_PREFIX))
    actions = np.asarray(dataset.columns['action'], np.float32)
    index = chunk_indices(dataset.episodes, horizon)
    if len(index) != len(actions):
        raise ValueError(f'{dataset.root}: the episodes cover {len(index)} frames, the data '
                         f'holds {len(actions)}')
    kept = active_frames(actions, dataset.episodes, keep_idle)
    tasks = dataset.columns['task_index']
    prompts = [dataset.tasks[int(tasks[i])] for i in kept]
    images = None
    if image_size is not None:
        images = {slot: np.empty((len(kept), image_size, image_size, 3), np.uint8)
                  for slot in slots}
        for n, i in enumerate(kept):
            for slot in slots:
                images[slot][n] = preprocess_image(dataset.image(int(i), IMAGE_PREFIX + slot),
                                                   image_size)
            if progress and ((n + 1) % 2000 == 0 or n + 1 == len(kept)):
                progress(n + 1, len(kept))
    return ChunkSamples(np.asarray(dataset.columns['observation.state'], np.float32)[kept],
                        actions[index][kept], np.asarray(dataset.columns['episode_index'])[kept],
                        slots, prompts, dataset, kept, images)
