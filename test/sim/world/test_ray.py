"""`lamp eval --ray ADDRESS`: the episodes run as Ray actors on a cluster (here a local Ray
instance the test starts and stops) and the report is the one a single process writes."""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile

import pytest

from lamp_ros.cli import main as lamp

WORLD = 'viperx_pick_place'


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


@pytest.fixture
def ray_cluster():
    """A local Ray head (its own short temp folder: Ray's socket paths must fit 107 bytes)."""
    ray = shutil.which('ray', path=os.path.dirname(sys.executable))
    assert ray, 'ray is in requirements.txt'
    port = _free_port()
    env = {**os.environ, 'RAY_USAGE_STATS_ENABLED': '0'}
    temp = tempfile.mkdtemp(prefix='ray')
    started = subprocess.run(
        [ray, 'start', '--head', f'--port={port}', '--node-ip-address=127.0.0.1',
         '--num-cpus=1', '--include-dashboard=false', f'--temp-dir={temp}'],
        env=env, capture_output=True, text=True, timeout=180)
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        yield f'127.0.0.1:{port}'
    finally:
        subprocess.run([ray, 'stop', '--force'], env=env, capture_output=True, timeout=120)
        shutil.rmtree(temp, ignore_errors=True)


def test_episodes_on_a_ray_cluster_give_the_local_report(ray_cluster, tmp_path):
    common = ['eval', '--expert', '--world', WORLD, '--episodes', '2']
    assert lamp([*common, '--ray', ray_cluster, '--out',
                 str(tmp_path / 'ray.json')]) == 0
    assert lamp([*common, '--out', str(tmp_path / 'local.json')]) == 0
    on_ray, local = (json.loads((tmp_path / f'{n}.json').read_text()) for n in ('ray', 'local'))
    assert on_ray['per_episode'] == local['per_episode'] and on_ray['success_rate'] == 1.0
