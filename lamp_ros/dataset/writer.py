"""A LeRobot v3.0 dataset written episode by episode, as LeRobot 0.6.1's DatasetWriter does.

Per episode: its frames go to the data parquet as one row group (images as PNG bytes inside
the parquet, LeRobot's `image` features), its statistics are computed (stats.py) and merged
into the dataset's, and its row of the episodes parquet records where its frames lie. A data
file that would pass 100 MB is closed and the next episode starts file-001 (LeRobot's rule).
`finish()` writes the metadata: info.json, stats.json, tasks.parquet, the episodes parquet.

The writer knows nothing of bags: an episode is its task, its state and action arrays and a
function that gives a frame's image (decoded only when written: a long episode is never in
memory as pixels, only, like LeRobot's, as the PNG bytes of its row group).
"""

from dataclasses import dataclass
import json
import os
from typing import Callable

import cv2
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lamp_ros.dataset import layout, stats


@dataclass
class EpisodeData:
    task: str
    states: np.ndarray       # (N, joints) float32
    actions: np.ndarray      # (N, joints) float32
    image: Callable          # (frame index, slot) -> (H, W, 3) uint8 RGB


def png(rgb: np.ndarray) -> bytes:
    """Lossless, as LeRobot stores an `image` feature (it writes PNG with PIL)."""
    ok, buf = cv2.imencode('.png', cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR),
                           [cv2.IMWRITE_PNG_COMPRESSION, 6])
    if not ok:
        raise ValueError('PNG encoding failed')
    return buf.tobytes()


def _write_json(data, path: str) -> None:
    with open(path, 'w', encoding='utf-8') as f:
        json.dump(data, f, indent=4, ensure_ascii=False)


def _tasks_table(tasks: list) -> pa.Table:
    """meta/tasks.parquet as pandas writes LeRobot's DataFrame (task_index, indexed by task):
    the pandas metadata makes `pd.read_parquet` give the task strings back as the index."""
    pandas_meta = {
        'index_columns': ['task'],
        'column_indexes': [{'name': None, 'field_name': None, 'pandas_type': 'unicode',
                            'numpy_type': 'object', 'metadata': {'encoding': 'UTF-8'}}],
        'columns': [{'name': 'task_index', 'field_name': 'task_index', 'pandas_type': 'int64',
                     'numpy_type': 'int64', 'metadata': None},
                    {'name': 'task', 'field_name': 'task', 'pandas_type': 'unicode',
                     'numpy_type': 'object', 'metadata': None}],
        'attributes': {}, 'creator': {'library': 'pyarrow', 'version': pa.__version__}}
    schema = pa.schema([('task_index', pa.int64()), ('task', pa.string())],
                       metadata={'pandas': json.dumps(pandas_meta)})
    return pa.table({'task_index': list(range(len(tasks))), 'task': tasks}, schema=schema)


class DatasetWriter:
    """Writes `root` (a new or empty folder): add_episode() per episode, then finish()."""

    def __init__(self, root: str, fps: int, joint_names, image_shapes: dict,
                 robot_type: str | None = None, progress=None):
        if os.path.isdir(root) and os.listdir(root):
            raise FileExistsError(f'{root}: exists and is not empty; give a new folder')
        os.makedirs(root, exist_ok=True)
        self.root, self.fps, self.robot_type = root, int(fps), robot_type
        self.slots = list(image_shapes)
        self.shapes = {slot: tuple(shape) for slot, shape in image_shapes.items()}
        self.features = layout.features(joint_names, image_shapes)
        self.schema = layout.data_schema(self.features)
        self._say = progress or (lambda message: None)
        self._tasks, self._episodes, self._stats = [], [], None
        self._frames = 0
        self._file = (0, 0)           # (chunk, file) of the open data file
        self._file_start = 0          # index of its first frame
        self._parquet = self._sink = None

    def _path(self, template: str, chunk_file: tuple) -> str:
        path = os.path.join(self.root, template.format(chunk_index=chunk_file[0],
                                                       file_index=chunk_file[1]))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return path

    def _next_file(self, frames: int) -> None:
        """LeRobot's rule: a file that would reach data_files_size_in_mb with this episode
        (at its frames' average size so far) is closed, the episode goes to the next one."""
        if self._parquet is None:
            return
        size_mb = self._sink.tell() / 1024**2   # what is written: the file may lag behind
        in_file = self._frames - self._file_start
        if size_mb + size_mb / max(in_file, 1) * frames < layout.DATA_FILES_SIZE_IN_MB:
            return
        self._close_data()
        chunk, file = self._file
        self._file = (chunk + 1, 0) if file == layout.CHUNKS_SIZE - 1 else (chunk, file + 1)
        self._file_start = self._frames

    def _image_column(self, episode: EpisodeData, slot: str, n: int, sampled: set,
                      kept: list) -> pa.Array:
        cells = []
        for i in range(n):
            if i and i % 500 == 0:
                self._say(f'episode {len(self._episodes)}: {slot} {i}/{n} frames')
            rgb = episode.image(i, slot)
            if rgb.shape != self.shapes[slot]:
                raise ValueError(f'camera {slot}: frame {i} is {rgb.shape[1]}x{rgb.shape[0]}, '
                                 f'the dataset\'s {slot} frames are {self.shapes[slot][1]}x'
                                 f'{self.shapes[slot][0]}')
            if i in sampled:
                kept.append(rgb)
            cells.append({'bytes': png(rgb), 'path': layout.IMAGE_NAME.format(frame_index=i)})
        return pa.array(cells, layout.IMAGE_STRUCT)

    def add_episode(self, episode: EpisodeData) -> None:
        index = len(self._episodes)
        n = len(episode.states)
        if n == 0 or len(episode.actions) != n:
            raise ValueError(f'episode {index}: {n} states and {len(episode.actions)} actions')
        if episode.task not in self._tasks:
            self._tasks.append(episode.task)
        columns = {
            # C order, as LeRobot stacks its frames: numpy's sums (so the means) depend on it
            layout.STATE: np.ascontiguousarray(episode.states, np.float32),
            layout.ACTION: np.ascontiguousarray(episode.actions, np.float32),
            'timestamp': np.arange(n) / self.fps,      # float64 for the stats, as LeRobot's
            'frame_index': np.arange(n, dtype=np.int64),
            'episode_index': np.full(n, index, np.int64),
            'index': np.arange(self._frames, self._frames + n, dtype=np.int64),
            'task_index': np.full(n, self._tasks.index(episode.task), np.int64),
        }
        sampled = stats.sample_indices(n)
        arrays, episode_stats = [], {}
        for key in self.features:
            if key.startswith(layout.IMAGE_PREFIX):
                slot = key[len(layout.IMAGE_PREFIX):]
                kept = []
                arrays.append(self._image_column(episode, slot, n, set(sampled), kept))
                # a sample may name a frame twice (short episodes round alike): keep the order
                by_index = dict(zip(sorted(set(sampled)), kept))
                episode_stats[key] = stats.image_stats([by_index[i] for i in sampled])
                self._say(f'episode {index}: {n} frames of {slot} encoded')
            else:
                values = columns[key]
                ftype = self.schema.field(key).type
                arrays.append(pa.FixedSizeListArray.from_arrays(
                    pa.array(values.reshape(-1), ftype.value_type), ftype.list_size)
                    if values.ndim == 2 else pa.array(values, ftype))
                episode_stats[key] = stats.vector_stats(values)
        self._next_file(n)
        if self._parquet is None:
            self._sink = pa.OSFile(self._path(layout.DATA_PATH, self._file), 'wb')
            self._parquet = pq.ParquetWriter(self._sink, self.schema, compression='snappy',
                                             use_dictionary=True)
        self._parquet.write_table(pa.Table.from_arrays(arrays, schema=self.schema))
        row = {'episode_index': index, 'tasks': [episode.task], 'length': n,
               'data/chunk_index': self._file[0], 'data/file_index': self._file[1],
               'dataset_from_index': self._frames, 'dataset_to_index': self._frames + n}
        for key, values in stats.to_json(episode_stats).items():
            for name, value in values.items():
                row[f'stats/{key}/{name}'] = value
        row['meta/episodes/chunk_index'] = 0
        row['meta/episodes/file_index'] = 0
        self._episodes.append(row)
        self._stats = stats.merge(self._stats, episode_stats)
        self._frames += n

    def _close_data(self) -> None:
        if self._parquet is not None:
            self._parquet.close()
            self._sink.close()
            self._parquet = self._sink = None

    def finish(self) -> dict:
        """Writes the metadata; returns info.json's content."""
        self._close_data()
        if not self._episodes:
            raise ValueError('no episode to write')
        info = layout.info(self.fps, self.features, len(self._episodes), self._frames,
                           len(self._tasks), self.robot_type)
        os.makedirs(os.path.join(self.root, 'meta'), exist_ok=True)
        _write_json(info, os.path.join(self.root, layout.INFO_PATH))
        _write_json(stats.to_json(self._stats), os.path.join(self.root, layout.STATS_PATH))
        pq.write_table(_tasks_table(self._tasks), os.path.join(self.root, layout.TASKS_PATH),
                       compression='snappy')
        episodes = pa.Table.from_pydict({key: [row[key] for row in self._episodes]
                                         for key in self._episodes[0]})
        pq.write_table(episodes, self._path(layout.EPISODES_PATH, (0, 0)),
                       compression='snappy')
        return info
