"""Bags -> a LeRobot v3.0 dataset: what `lamp dataset` runs.

Each bag is one episode, in the order given. Every bag is read and checked first (its frames,
joints, cameras, frame sizes, command rate, task), one at a time, so that a mismatch in the
last bag is an error before anything is written; then each is read again and written. A
failure while writing removes what was written, never leaving half a dataset.

The dataset's fps is LeRobot's clock: frame i of an episode has timestamp i / fps. By default
it is the rate of the recorded commands, rounded; bags whose rates round differently need
--fps. The task of an episode is --task, else the prompt in the node's session record.
"""

from dataclasses import dataclass
import os
import shutil

import numpy as np

from lamp_ros.dataset.frames import Episode, read_episode
from lamp_ros.dataset.writer import DatasetWriter, EpisodeData


@dataclass(frozen=True)
class BagSummary:
    bag: str
    frames: int
    skipped: int             # commands before the first inputs
    rate_hz: float           # of its recorded commands
    joint_names: tuple
    image_shapes: dict       # slot -> (H, W, 3)
    task: str


@dataclass(frozen=True)
class BuildResult:
    out: str
    fps: int
    episodes: tuple          # BagSummary per episode
    frames: int
    tasks: tuple


def _summary(episode: Episode, task: str | None) -> BagSummary:
    if task is None:
        task = episode.prompt
    if not task:
        raise ValueError(f'{episode.bag}: no task: the bag has no session record of the node '
                         'with a prompt; give --task TEXT')
    shapes = {slot: episode.image(0, slot).shape for slot in episode.cameras}
    return BagSummary(episode.bag, len(episode.frames), episode.skipped,
                      episode.command_rate_hz, tuple(episode.joint_names), shapes, task)


def _check_alike(first: BagSummary, other: BagSummary) -> None:
    if set(other.joint_names) != set(first.joint_names):
        raise ValueError(f'joint names differ between bags: {first.bag} has '
                         f'{list(first.joint_names)}, {other.bag} has {list(other.joint_names)}; '
                         'one dataset holds one robot')
    if list(other.image_shapes) != list(first.image_shapes):
        raise ValueError(f'cameras differ between bags: {first.bag} has '
                         f'{list(first.image_shapes)}, {other.bag} has '
                         f'{list(other.image_shapes)}')
    for slot, shape in first.image_shapes.items():
        if other.image_shapes[slot] != shape:
            raise ValueError(f'camera {slot}: {first.bag} frames are {shape[1]}x{shape[0]}, '
                             f'{other.bag} frames are {other.image_shapes[slot][1]}x'
                             f'{other.image_shapes[slot][0]}')


def _fps(summaries, fps: int | None) -> int:
    if fps is not None:
        if fps <= 0:
            raise ValueError(f'--fps {fps}: must be positive')
        return fps
    rates = {s.bag: round(s.rate_hz) for s in summaries}
    if any(r <= 0 for r in rates.values()):
        raise ValueError(f'command rate unknown (a bag with a single command?): {rates}; '
                         'give --fps')
    if len(set(rates.values())) > 1:
        by_rate = {}
        for bag, rate in rates.items():
            by_rate.setdefault(rate, []).append(bag)
        counts = ', '.join(f'{rate} Hz: {len(bags)} bag{"s" * (len(bags) > 1)} (e.g. {bags[0]})'
                           for rate, bags in sorted(by_rate.items()))
        raise ValueError(f'the bags\' command rates round differently ({counts}); give --fps')
    return next(iter(rates.values()))


def _episode_data(episode: Episode, summary: BagSummary, joint_names) -> EpisodeData:
    order = [list(summary.joint_names).index(j) for j in joint_names]
    return EpisodeData(summary.task,
                       np.stack([f.state for f in episode.frames])[:, order],
                       np.stack([f.action for f in episode.frames])[:, order],
                       episode.image)


def build_dataset(bags, out: str, fps: int | None = None, task: str | None = None,
                  robot_type: str | None = None, progress=None) -> BuildResult:
    """Write the bags as episodes of a new dataset at `out` (see the module docstring)."""
    say = progress or (lambda message: None)
    if not bags:
        raise ValueError('no bag given')
    existed = os.path.isdir(out)
    if os.path.exists(out) and not (existed and not os.listdir(out)):
        raise FileExistsError(f'--out {out}: exists and is not empty; give a new folder')
    summaries = []
    for i, bag in enumerate(bags):
        summaries.append(_summary(read_episode(bag), task))
        s = summaries[-1]
        skipped = f', {s.skipped} commands before the first inputs left out' if s.skipped \
            else ''
        say(f'checked {i + 1}/{len(bags)} {bag}: {s.frames} frames, commands at '
            f'{s.rate_hz:.2f} Hz{skipped}')
        _check_alike(summaries[0], s)
    rate = _fps(summaries, fps)
    joint_names = list(summaries[0].joint_names)
    writer = DatasetWriter(out, rate, joint_names, summaries[0].image_shapes, robot_type,
                           progress=say)
    try:
        for i, (bag, summary) in enumerate(zip(bags, summaries)):
            writer.add_episode(_episode_data(read_episode(bag), summary, joint_names))
            say(f'wrote episode {i}/{len(bags) - 1}: {summary.frames} frames')
        writer.finish()
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        if existed:
            os.makedirs(out, exist_ok=True)
        raise
    return BuildResult(out, rate, tuple(summaries), sum(s.frames for s in summaries),
                       tuple(dict.fromkeys(s.task for s in summaries)))
