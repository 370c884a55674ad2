"""point_reach, two models with the policy's own numpy glue between them, compiled for the CPU:
the glue runs as a host operator the artifact records by module and source hash, its
calibration file is packed as a resource, and a fresh process runs the artifact without
torch."""

import hashlib
import json
import os
import subprocess
import sys

import numpy as np

from lamp_ros.runtime import Runtime
from lamp_ros.spec import load_spec
from lamp_ros.trace.from_spec import build_pipeline

SPEC = 'config/specs/point_reach.yaml'


def _plan(root):
    with open(os.path.join(root, 'plan.json'), encoding='utf-8') as f:
        return json.load(f)


def test_the_glue_is_a_recorded_host_operator(point_reach_artifact):
    groups = {g['name']: g for g in _plan(point_reach_artifact)['groups']}
    backends = [g['backend'] for g in groups.values()]
    assert backends.count('onnxruntime') == 2  # locate, controller: the glue between them
    (glue,) = [g for g in groups.values() if 'point_to_target' in g['nodes']]
    assert glue['backend'] == 'host'
    module = 'lamp_ros.policies.point_reach.glue'
    assert glue['build']['modules'][module]['ops'] == ['point_to_target']
    with open(os.path.join('lamp_ros', 'policies', 'point_reach', 'glue.py'), 'rb') as f:
        assert glue['build']['modules'][module]['sha256'] == hashlib.sha256(f.read()).hexdigest()
    assert os.listdir(os.path.join(point_reach_artifact, 'resources')) == ['calibration.json']
    for name, g in groups.items():  # lamp's own operators are not recorded as modules
        if name != glue['name']:
            assert 'modules' not in g['build'], name


def test_a_fresh_process_runs_it_without_torch(point_reach_artifact):
    code = (
        'import sys\n'
        'from lamp_ros.runtime import Runtime\n'
        'from lamp_ros.runtime.loop import run_ticks\n'
        f'rt = Runtime.load({point_reach_artifact!r})\n'
        'commands = run_ticks(rt, 3, realtime=False)\n'
        'assert commands[-1][1] is not None\n'
        'print("TORCH", "torch" in sys.modules)\n')
    result = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert 'TORCH False' in result.stdout


def test_the_runtime_computes_what_the_eager_policy_does(point_reach_artifact):
    pipeline = build_pipeline(load_spec(SPEC))
    runtime = Runtime.load(point_reach_artifact)
    for seed in range(3):
        obs = pipeline.example_observation(seed=seed)
        pipeline.reset()
        runtime.reset()
        captured = {}
        command = runtime.run(runtime.feeds(obs, 0.0), capture=captured)['clamp.command']
        np.testing.assert_allclose(command, pipeline.tick(obs, 0.0), atol=1e-5, rtol=1e-4)
        target = captured['point_to_target.target']
        assert target.shape == (3,) and target[2] == np.float32(0.12)  # the calibration's z
