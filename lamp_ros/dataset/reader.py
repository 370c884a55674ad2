"""A LeRobot v3.0 dataset read back without LeRobot: what the tests (and a curious user) use to
see what `lamp dataset` wrote.

It follows the files the way LeRobot does: info.json for the features and fps, the episodes
parquet for where each episode's frames lie (data/chunk_index, data/file_index,
dataset_from_index/to_index), tasks.parquet for the task strings, stats.json. Images stay PNG
bytes until asked for.
"""

from dataclasses import dataclass
import json
import os

import cv2
import numpy as np
import pyarrow.parquet as pq

from lamp_ros.dataset import layout


@dataclass
class Dataset:
    root: str
    info: dict
    stats: dict
    tasks: list              # task strings, by task_index
    episodes: list           # dict per episode: the episodes parquet's row, stats/ left out
    columns: dict            # feature -> np.ndarray over all frames (images: PNG bytes)

    @property
    def fps(self) -> int:
        return self.info['fps']

    @property
    def image_keys(self) -> list:
        return [k for k, ft in self.info['features'].items() if ft['dtype'] == 'image']

    def __len__(self) -> int:
        return len(self.columns['index'])

    def image(self, index: int, key: str) -> np.ndarray:
        """Frame `index`'s image of feature `key`, decoded to (H, W, 3) uint8 RGB."""
        raw = np.frombuffer(self.columns[key][index], np.uint8)
        return cv2.cvtColor(cv2.imdecode(raw, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)

    def episode_frames(self, episode_index: int) -> range:
        row = self.episodes[episode_index]
        return range(row['dataset_from_index'], row['dataset_to_index'])


def read_dataset(root: str) -> Dataset:
    """The dataset at `root`; ValueError when it is not a LeRobot v3.0 dataset."""
    info_path = os.path.join(root, layout.INFO_PATH)
    if not os.path.isfile(info_path):
        raise ValueError(f'{root}: no {layout.INFO_PATH}; not a LeRobot dataset')
    with open(info_path, encoding='utf-8') as f:
        info = json.load(f)
    if info.get('codebase_version') != layout.CODEBASE_VERSION:
        raise ValueError(f'{root}: codebase_version {info.get("codebase_version")!r}, this '
                         f'reader knows {layout.CODEBASE_VERSION}')
    with open(os.path.join(root, layout.STATS_PATH), encoding='utf-8') as f:
        stats = json.load(f)
    tasks = pq.read_table(os.path.join(root, layout.TASKS_PATH)).to_pydict()
    by_index = dict(zip(tasks['task_index'], tasks['task']))
    meta_dir = os.path.join(root, 'meta', 'episodes')
    episodes = []
    for chunk in sorted(os.listdir(meta_dir)):
        for name in sorted(os.listdir(os.path.join(meta_dir, chunk))):
            table = pq.read_table(os.path.join(meta_dir, chunk, name))
            keep = [c for c in table.column_names if not c.startswith('stats/')]
            episodes += table.select(keep).to_pylist()
    files = sorted({(e['data/chunk_index'], e['data/file_index']) for e in episodes})
    tables = [pq.read_table(os.path.join(root, info['data_path'].format(
        chunk_index=c, file_index=f))) for c, f in files]
    columns = {}
    for key, ft in info['features'].items():
        parts = [t.column(key).combine_chunks() for t in tables]
        if ft['dtype'] == 'image':
            columns[key] = [cell['bytes'] for part in parts for cell in part.to_pylist()]
        elif list(ft['shape']) == [1]:
            columns[key] = np.concatenate([p.to_numpy() for p in parts])
        else:
            columns[key] = np.concatenate([
                p.flatten().to_numpy().reshape(len(p), ft['shape'][0]) for p in parts])
    return Dataset(root, info, stats, [by_index[i] for i in range(len(by_index))], episodes,
                   columns)
