"""`lamp compile` of pi05_tiny on CPU: artifact layout, plan, memory, parity, determinism."""

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
import yaml

from lamp_ros.artifact.manifest import sha256_file
from lamp_ros.policies.pi05.pipeline import pipeline_from_spec
from lamp_ros.runtime import Runtime
from lamp_ros.spec import load_spec, spec_data

SPEC = 'config/specs/pi05_tiny_random.yaml'


@pytest.fixture(scope='module')
def artifact(tiny_artifact):
    return tiny_artifact


def _json(root, rel):
    with open(os.path.join(root, rel)) as f:
        return json.load(f)


def test_layout_and_manifest(artifact):
    manifest = _json(artifact, 'manifest.json')
    assert {'schema_version', 'artifact_id', 'target', 'abi', 'files'} <= set(manifest)
    assert manifest['target'] == 'cpu'
    for rel in ('graph.json', 'plan.json', 'memory.json', 'weights/vision.safetensors',
                'weights/prefix.safetensors', 'weights/denoise.safetensors',
                'resources/tokenizer.model'):
        assert rel in manifest['files'], rel
        assert sha256_file(os.path.join(artifact, rel)) == manifest['files'][rel]['sha256']
    # what the build measured is checksummed, but not part of the id
    assert not [rel for rel in manifest['files'] if rel.startswith('evidence/')]
    for rel in ('evidence/build.json', 'evidence/parity.json',
                'evidence/parity_inputs.safetensors', 'evidence/parity_expected.safetensors'):
        assert sha256_file(os.path.join(artifact, rel)) == manifest['volatile'][rel]['sha256']
    assert set(manifest['abi']['inputs']) == {'images.base', 'images.left_wrist',
                                              'images.right_wrist', 'state', 'prompt', 't',
                                              't_obs'}
    assert manifest['abi']['joint_names'][-1] == 'gripper'
    assert manifest['created_by']['torch'].startswith('2.13')


def test_plan_groups_and_coverage(artifact):
    plan = _json(artifact, 'plan.json')
    assert {'groups', 'coverage'} <= set(plan)
    for group in plan['groups']:
        assert {'name', 'backend', 'precision', 'device', 'nodes', 'reason'} <= set(group)
    assert plan['options'] == _json(artifact, 'spec.json')['build']  # how it was built
    backends = [g['backend'] for g in plan['groups']]
    assert backends.count('onnxruntime') == 1
    assert plan['coverage']['backends']['onnxruntime']['ops'] > 2000


def test_memory_plan_is_tight(artifact):
    summary = _json(artifact, 'memory.json')['summary']
    assert {'naive_bytes', 'lower_bound_bytes', 'arena_bytes'} <= set(summary)
    assert summary['lower_bound_bytes'] <= summary['arena_bytes'] <= summary['naive_bytes']
    assert summary['arena_bytes'] <= 1.15 * summary['lower_bound_bytes']


def test_parity_passes_at_fp32_tolerance(artifact):
    parity = _json(artifact, 'evidence/parity.json')
    assert parity['passed'] and len(parity['samples']) == 4
    for name in ('denoise.actions', 'unnormalize_actions.chunk', 'clamp.command'):
        assert parity['worst'][name]['max_abs'] <= 1e-4, name
    # one sample runs with a missing camera
    assert any(s['cameras'] == ['base', 'left_wrist'] for s in parity['samples'])


def test_onnx_weights_live_once_in_safetensors(artifact):
    group = [g for g in _json(artifact, 'plan.json')['groups'] if g['backend'] == 'onnxruntime']
    path = os.path.join(artifact, group[0]['build']['onnx'])
    model = onnx.load(path, load_external_data=False)
    external = [i for i in model.graph.initializer if i.data_location == onnx.TensorProto.EXTERNAL]
    # 47 tensors: q/k/v and gate/up merged by the spec's passes
    assert len(external) == len(group[0]['build']['weights']) > 40
    locations = {e.value for i in external for e in i.external_data if e.key == 'location'}
    assert locations == {'../../weights/vision.safetensors', '../../weights/prefix.safetensors',
                         '../../weights/denoise.safetensors'}


def test_runtime_matches_the_eager_pipeline_tick_by_tick(artifact):
    runtime = Runtime.load(artifact)
    pipeline = pipeline_from_spec(load_spec(SPEC))
    obs = pipeline.policy.example_observation(seed=11)
    pipeline.reset()
    runtime.reset()
    for k in range(30):  # crosses a re-plan at tick 25
        t = k / 22.0
        np.testing.assert_allclose(runtime.step(obs, t), pipeline.tick(obs, t), atol=1e-4)


def test_one_spec_built_twice_is_one_artifact(artifact, tmp_path):
    """A second build in a fresh process with every compile cache empty (torch's inductor and
    Triton caches; the CPU build tunes nothing, so it has no tile cache to clear: the cuda
    lowering's cold and warm choices are tested in test/kernels/test_lowering.py) gets the same
    artifact id; `lamp diff` finds no cause changed and lists the evidence that differs (the
    stage timings) on its own."""
    from lamp_ros.whitebox.diff import diff_artifacts
    again, caches = tmp_path / 'again', tmp_path / 'empty_caches'
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(caches / 'inductor'),
               TRITON_CACHE_DIR=str(caches / 'triton'), XDG_CACHE_HOME=str(caches))
    result = subprocess.run([sys.executable, '-m', 'lamp_ros.cli', 'compile', SPEC, '--out',
                             str(again)], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert _json(str(again), 'manifest.json')['artifact_id'] == \
        _json(artifact, 'manifest.json')['artifact_id']
    report = diff_artifacts(artifact, str(again))
    assert report['identical'] and report['changed'] == [] and report['files'] == {}
    assert set(report['evidence_files']) <= {'evidence/build.json'}  # nothing else varies
    for leaf in report['evidence_files'].get('evidence/build.json', []):
        assert leaf.startswith('stage_seconds.'), leaf


def test_parity_failure_exits_non_zero(tmp_path):
    spec = spec_data(SPEC)
    spec['parity'] = {'samples': 1, 'atol': 0.0, 'rtol': 0.0}
    spec['fusion']['text_lengths'] = []  # one ONNX export instead of three: the test is parity
    path = tmp_path / 'strict.yaml'
    path.write_text(yaml.safe_dump(spec))
    result = subprocess.run([sys.executable, '-m', 'lamp_ros.cli', 'compile', str(path),
                             '--out', str(tmp_path / 'strict')], capture_output=True, text=True)
    assert result.returncode == 3
    assert 'parity failed' in result.stderr and 'denoise.actions' in result.stderr
