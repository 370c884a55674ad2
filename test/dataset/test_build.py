"""`lamp dataset`: bags -> a LeRobot v3.0 dataset, read back with lamp's own reader.

The synthetic recordings (lamp_ros/dataset/sample_bag.py) define every value, so each frame is
checked exactly: frame k = command k, with image k of every camera and joint state 4 k + 2."""

import json
import os
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest

from lamp_ros.cli import main
from lamp_ros.dataset import sample_bag
from lamp_ros.dataset.reader import read_dataset
from lamp_ros.node.convert import compressed_to_rgb
from lamp_ros.regress.bag import read_bag

JOINTS = ['shoulder', 'elbow', 'wrist']
REAL_BAG = 'test/data/pi05_tiny_sim'


@pytest.fixture
def two_bags(tmp_path):
    a, b = str(tmp_path / 'a'), str(tmp_path / 'b')
    sample_bag.write_sample_bag(a, frames=12, lead=2, prompt='pick up the cube')
    sample_bag.write_sample_bag(b, frames=8, compressed=True, array=True, prompt='stack it')
    return a, b


def _dataset(tmp_path, capsys, *args) -> tuple:
    out = str(tmp_path / 'out')
    code = main(['dataset', *args, '--out', out])
    captured = capsys.readouterr()
    return code, out, captured.out + captured.err


def test_two_bags_are_two_episodes_of_exact_frames(tmp_path, capsys, two_bags):
    code, out, text = _dataset(tmp_path, capsys, *two_bags)
    assert code == 0, text
    assert 'wrote 2 episodes, 20 frames at 10 fps' in text
    assert "LeRobotDataset('local/out'" in text
    assert '2 commands before the first inputs left out' in text   # progress lines
    data = read_dataset(out)
    assert data.info['codebase_version'] == 'v3.0' and data.fps == 10 and len(data) == 20
    assert data.info['total_episodes'] == 2 and data.info['total_tasks'] == 2
    assert data.tasks == ['pick up the cube', 'stack it']
    features = data.info['features']
    assert list(features)[:4] == ['observation.images.base', 'observation.images.wrist',
                                  'observation.state', 'action']
    assert features['observation.state']['names'] == JOINTS == features['action']['names']
    assert features['observation.images.base']['shape'] == [12, 16, 3]
    assert [(e['dataset_from_index'], e['dataset_to_index'], e['tasks'])
            for e in data.episodes] == [(0, 12, ['pick up the cube']), (12, 20, ['stack it'])]
    for episode, length in enumerate((12, 8)):
        for k, i in enumerate(data.episode_frames(episode)):
            assert data.columns['episode_index'][i] == episode
            assert data.columns['task_index'][i] == episode
            assert data.columns['frame_index'][i] == k and data.columns['index'][i] == i
            assert data.columns['timestamp'][i] == np.float32(k / 10)
            np.testing.assert_array_equal(data.columns['action'][i],
                                          sample_bag.action(k, 3).astype(np.float32))
            np.testing.assert_array_equal(data.columns['observation.state'][i],
                                          sample_bag.state(4 * k + 2, 3).astype(np.float32))
            for s, slot in enumerate(('base', 'wrist')):
                np.testing.assert_array_equal(data.image(i, f'observation.images.{slot}'),
                                              sample_bag.image(k, s, 16, 12))


def test_statistics_are_the_frames(tmp_path, capsys, two_bags):
    code, out, text = _dataset(tmp_path, capsys, *two_bags)
    assert code == 0, text
    data = read_dataset(out)
    action = data.columns['action']
    stats = data.stats['action']
    np.testing.assert_allclose(stats['min'], action.min(axis=0), rtol=1e-6)
    np.testing.assert_allclose(stats['max'], action.max(axis=0), rtol=1e-6)
    np.testing.assert_allclose(stats['mean'], action.mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(stats['std'], action.std(axis=0), rtol=1e-4)
    assert stats['count'] == [20]
    assert set(stats) == {'min', 'max', 'mean', 'std', 'count', 'q01', 'q10', 'q50', 'q90',
                          'q99'}
    pixels = np.stack([data.image(i, 'observation.images.base') for i in range(20)]) / 255
    image = data.stats['observation.images.base']
    assert np.array(image['mean']).shape == (3, 1, 1)
    np.testing.assert_allclose(np.array(image['mean'])[:, 0, 0],
                               pixels.reshape(-1, 3).mean(axis=0), rtol=1e-5)
    episodes = pq.read_table(f'{out}/meta/episodes/chunk-000/file-000.parquet').to_pylist()
    np.testing.assert_allclose(episodes[1]['stats/observation.state/mean'],
                               data.columns['observation.state'][12:].mean(axis=0), rtol=1e-5)
    assert episodes[1]['stats/index/min'] == [12.0]


def test_real_recording_frames_are_the_latest_inputs_before_each_command(tmp_path, capsys):
    """The committed bag of the simulated arm (JPEG cameras, no session record: --task)."""
    code, out, text = _dataset(tmp_path, capsys, REAL_BAG, '--task', 'reach the cube')
    assert code == 0, text
    data = read_dataset(out)
    assert len(data) == 66 and data.fps == 22 and data.tasks == ['reach the cube']
    latest, i = {}, 0
    for m in read_bag(REAL_BAG):
        if m.topic != '/vla_policy/joint_trajectory':
            latest[m.topic] = m
            continue
        msg = m.decode()
        np.testing.assert_array_equal(data.columns['action'][i],
                                      np.float32(msg.points[0].positions))
        joints = latest['/joint_states'].decode()
        order = [list(joints.name).index(n) for n in msg.joint_names]
        np.testing.assert_array_equal(data.columns['observation.state'][i],
                                      np.float32(np.asarray(joints.position)[order]))
        if i % 20 == 0:
            jpeg = latest['/camera/left_wrist/image_raw/compressed'].decode()
            np.testing.assert_array_equal(data.image(i, 'observation.images.left_wrist'),
                                          compressed_to_rgb(jpeg))
        i += 1
    assert i == 66


def test_task_and_fps_options(tmp_path, capsys, two_bags):
    code, out, text = _dataset(tmp_path, capsys, two_bags[0], '--task', 'wave', '--fps', '5',
                               '--robot-type', 'sim7')
    assert code == 0, text
    data = read_dataset(out)
    assert data.tasks == ['wave'] and data.fps == 5
    assert data.columns['timestamp'][3] == np.float32(3 / 5)
    with open(f'{out}/meta/info.json', encoding='utf-8') as f:
        assert json.load(f)['robot_type'] == 'sim7'


def test_the_dataset_package_imports_no_torch():
    """lamp dataset runs where the robot's recordings are: no torch needed."""
    code = ('import sys, lamp_ros.dataset.build, lamp_ros.dataset.reader, '
            'lamp_ros.dataset.sample_bag; sys.exit("torch" in sys.modules)')
    assert subprocess.run([sys.executable, '-c', code], env=dict(
        os.environ, PYTHONPATH=os.getcwd())).returncode == 0


def test_a_full_data_file_is_closed_and_the_next_episode_starts_the_next(
        tmp_path, capsys, two_bags, monkeypatch):
    """LeRobot's rule at 100 MB, here at 3 kB: episode 1 would pass it, so it goes to
    file-001; the episodes parquet says where each episode lies."""
    from lamp_ros.dataset import layout
    monkeypatch.setattr(layout, 'DATA_FILES_SIZE_IN_MB', 0.003)
    code, out, text = _dataset(tmp_path, capsys, *two_bags)
    assert code == 0, text
    data = read_dataset(out)
    assert [(e['data/chunk_index'], e['data/file_index']) for e in data.episodes] == [
        (0, 0), (0, 1)]
    assert os.path.isfile(f'{out}/data/chunk-000/file-001.parquet')
    assert list(data.columns['index']) == list(range(20))
    np.testing.assert_array_equal(data.image(19, 'observation.images.wrist'),
                                  sample_bag.image(7, 1, 16, 12))
