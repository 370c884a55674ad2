"""The committed LeRobot v3.0 fixture (test/data/lerobot_v3): LeRobot 0.6.1 read it and wrote
the same frames identically (scripts/fixtures/check_lerobot_dataset.py, not run in CI: LeRobot
needs Python 3.12). Here: it is v3.0, lamp's reader reads it, and lamp writes it the same way
today, so what LeRobot checked is what `lamp dataset` still writes."""

import json

import numpy as np
import pyarrow.parquet as pq

from lamp_ros.dataset.reader import read_dataset
from load_script import load_script

FIXTURE = 'test/data/lerobot_v3'


def test_the_fixture_is_a_v3_dataset_of_two_episodes():
    with open(f'{FIXTURE}/meta/info.json', encoding='utf-8') as f:
        info = json.load(f)
    assert info['codebase_version'] == 'v3.0'
    assert (info['total_episodes'], info['total_frames'], info['fps']) == (2, 40, 10)
    data = read_dataset(FIXTURE)
    assert data.tasks == ['pick up the cube', 'put the cube in the bowl']
    assert [e['length'] for e in data.episodes] == [20, 20]
    assert data.image(39, 'observation.images.wrist').shape == (12, 16, 3)


def test_lamp_still_writes_the_fixture(tmp_path):
    script = load_script('scripts', 'fixtures', 'make_lerobot_dataset.py')
    out = str(tmp_path / 'fixture')
    script.make(out)
    for name in ('meta/info.json', 'meta/stats.json'):
        with open(f'{FIXTURE}/{name}', encoding='utf-8') as f, \
                open(f'{out}/{name}', encoding='utf-8') as g:
            assert json.load(f) == json.load(g), name
    for name in ('meta/tasks.parquet', 'meta/episodes/chunk-000/file-000.parquet'):
        committed, fresh = pq.read_table(f'{FIXTURE}/{name}'), pq.read_table(f'{out}/{name}')
        assert committed.schema.remove_metadata() == fresh.schema.remove_metadata()
        assert committed.to_pylist() == fresh.to_pylist(), name
    committed, fresh = read_dataset(FIXTURE), read_dataset(out)
    assert pq.read_schema(f'{out}/data/chunk-000/file-000.parquet').equals(
        pq.read_schema(f'{FIXTURE}/data/chunk-000/file-000.parquet'), check_metadata=True)
    for key, column in committed.columns.items():
        if key in committed.image_keys:
            for i in range(len(committed)):   # pixels: another zlib may pack PNGs otherwise
                np.testing.assert_array_equal(committed.image(i, key), fresh.image(i, key))
        else:
            np.testing.assert_array_equal(column, fresh.columns[key])
