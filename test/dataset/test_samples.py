"""A LeRobot dataset as training samples (dataset/samples.py): each frame's observation and the
chunk of actions from it on, clipped at its episode's end, read from the committed LeRobot v3.0
fixture (test/data/lerobot_v3, checked against LeRobot itself by scripts/fixtures/)."""

import numpy as np
import pytest

from lamp_ros.dataset.reader import read_dataset
from lamp_ros.dataset.samples import chunk_indices, chunk_samples
from lamp_ros.ops.image import preprocess_image

FIXTURE = 'test/data/lerobot_v3'


@pytest.fixture(scope='module')
def dataset():
    return read_dataset(FIXTURE)


def test_chunks_run_to_the_episode_end_and_never_into_the_next():
    episodes = [{'dataset_from_index': 0, 'dataset_to_index': 3},
                {'dataset_from_index': 3, 'dataset_to_index': 5}]
    assert chunk_indices(episodes, 4).tolist() == [
        [0, 1, 2, 2], [1, 2, 2, 2], [2, 2, 2, 2], [3, 4, 4, 4], [4, 4, 4, 4]]


def test_each_sample_is_its_frame_and_the_actions_after_it(dataset):
    samples = chunk_samples(dataset, horizon=6)
    assert len(samples) == len(dataset) and samples.slots == ('base', 'wrist')
    actions = dataset.columns['action']
    for episode in dataset.episodes:
        first, last = episode['dataset_from_index'], episode['dataset_to_index'] - 1
        np.testing.assert_array_equal(samples.actions[first], actions[first:first + 6])
        np.testing.assert_array_equal(samples.actions[last], np.repeat(actions[last][None], 6, 0))
    obs = samples.observation(3)
    np.testing.assert_array_equal(obs['images']['wrist'],
                                  dataset.image(3, 'observation.images.wrist'))
    np.testing.assert_array_equal(obs['state'], dataset.columns['observation.state'][3])
    assert obs['prompt'] == dataset.tasks[int(dataset.columns['task_index'][3])]


def test_decoded_up_front_the_images_are_what_the_pipeline_letterboxes(dataset):
    samples = chunk_samples(dataset, horizon=4, image_size=32)
    raw = dataset.image(7, 'observation.images.base')
    np.testing.assert_array_equal(samples.observation(7)['images']['base'],
                                  preprocess_image(raw, 32))
