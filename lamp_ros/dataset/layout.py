"""The LeRobot v3.0 layout, as LeRobot 0.6.1 writes it (lerobot/datasets/utils.py,
feature_utils.py, io_utils.py, dataset_writer.py): paths, the default per-frame features, and
each feature's type in parquet.

LeRobot reads the data parquet through Hugging Face `datasets`, which takes every column's type
from the file's `huggingface` schema metadata: an image column is only decoded as an image when
that metadata says `Image`. The schema and its metadata are therefore written here exactly as
`datasets.Dataset.from_dict(..., features=get_hf_features_from_features(...))` makes them.
"""

import json

import pyarrow as pa

CODEBASE_VERSION = 'v3.0'
CHUNKS_SIZE = 1000              # files per chunk folder
DATA_FILES_SIZE_IN_MB = 100
VIDEO_FILES_SIZE_IN_MB = 200

INFO_PATH = 'meta/info.json'
STATS_PATH = 'meta/stats.json'
TASKS_PATH = 'meta/tasks.parquet'
EPISODES_PATH = 'meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet'
DATA_PATH = 'data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet'
IMAGE_NAME = 'frame-{frame_index:06d}.png'   # the `path` LeRobot keeps beside each image's bytes

IMAGE_PREFIX = 'observation.images.'
STATE = 'observation.state'
ACTION = 'action'
# lerobot/utils/constants.py DEFAULT_FEATURES: every frame has these, after the caller's features
DEFAULT_FEATURES = {
    'timestamp': {'dtype': 'float32', 'shape': [1], 'names': None},
    'frame_index': {'dtype': 'int64', 'shape': [1], 'names': None},
    'episode_index': {'dtype': 'int64', 'shape': [1], 'names': None},
    'index': {'dtype': 'int64', 'shape': [1], 'names': None},
    'task_index': {'dtype': 'int64', 'shape': [1], 'names': None},
}
IMAGE_STRUCT = pa.struct([('bytes', pa.binary()), ('path', pa.string())])
ARROW_TYPES = {'float32': pa.float32(), 'float64': pa.float64(), 'int64': pa.int64()}


def image_key(slot: str) -> str:
    return IMAGE_PREFIX + slot


def features(joint_names, image_shapes: dict) -> dict:
    """info.json's `features`: one image per camera slot ((H, W, 3), in slot order), the state
    and the action over the joints, then the default features (LeRobot's order)."""
    out = {image_key(slot): {'dtype': 'image', 'shape': list(shape),
                             'names': ['height', 'width', 'channels']}
           for slot, shape in image_shapes.items()}
    for key in (STATE, ACTION):
        out[key] = {'dtype': 'float32', 'shape': [len(joint_names)], 'names': list(joint_names)}
    return {**out, **{k: dict(v) for k, v in DEFAULT_FEATURES.items()}}


def _arrow_type(ft: dict):
    if ft['dtype'] == 'image':
        return IMAGE_STRUCT
    if list(ft['shape']) == [1]:
        return ARROW_TYPES[ft['dtype']]
    if len(ft['shape']) == 1:
        return pa.list_(ARROW_TYPES[ft['dtype']], ft['shape'][0])
    raise ValueError(f'feature {ft}: only images, scalars and vectors are written')


def _hf_feature(ft: dict) -> dict:
    if ft['dtype'] == 'image':
        return {'_type': 'Image'}
    value = {'dtype': ft['dtype'], '_type': 'Value'}
    if list(ft['shape']) == [1]:
        return value
    return {'feature': value, 'length': ft['shape'][0], '_type': 'List'}


def data_schema(feats: dict) -> pa.Schema:
    """The data parquet's schema: a column per feature, in order, with the `huggingface`
    metadata that tells `datasets` (and so LeRobot) what each column is."""
    hf = {'info': {'features': {key: _hf_feature(ft) for key, ft in feats.items()}}}
    return pa.schema([(key, _arrow_type(ft)) for key, ft in feats.items()],
                     metadata={'huggingface': json.dumps(hf)})


def info(fps: int, feats: dict, total_episodes: int, total_frames: int, total_tasks: int,
         robot_type: str | None = None) -> dict:
    """meta/info.json, keys in DatasetInfo's order; images in the parquet, so no video_path."""
    return {'codebase_version': CODEBASE_VERSION, 'fps': int(fps), 'features': feats,
            'total_episodes': total_episodes, 'total_frames': total_frames,
            'total_tasks': total_tasks, 'chunks_size': CHUNKS_SIZE,
            'data_files_size_in_mb': DATA_FILES_SIZE_IN_MB,
            'video_files_size_in_mb': VIDEO_FILES_SIZE_IN_MB, 'data_path': DATA_PATH,
            'video_path': None, 'robot_type': robot_type,
            'splits': {'train': f'0:{total_episodes}'}}
