"""act_small trained by scripts/train_demo_policy.py on a LeRobot dataset (the committed v3.0
fixture, a few steps): the checkpoint it writes is what a spec's `weights.file` loads, the eager
pipeline then computes with the trained network, and a checkpoint the spec does not describe is
refused by name."""

import json
import os
import shutil

import numpy as np
import pytest
import yaml

from lamp_ros.spec import load_spec, SpecError
from lamp_ros.trace.from_spec import build_pipeline

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))))


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        'train_demo_policy', os.path.join(ROOT, 'scripts', 'train_demo_policy.py'))
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = str(tmp_path_factory.mktemp('act') / 'ckpt')
    assert script.main(['--policy', 'act_small', '--dataset', 'test/data/lerobot_v3',
                        '--steps', '3', '--batch-size', '4', '--image-size', '32',
                        '--grid', '2', '--threads', '1', '--out', out]) == 0
    return out


def _spec(tmp_path, checkpoint: str, **options) -> str:
    with open(os.path.join(checkpoint, 'config.json'), encoding='utf-8') as f:
        written = json.load(f)
    assert written['type'] == 'act_small'
    data = {'schema': 'lamp.spec/1', 'name': 'act_trained',
            'policy': {'entry': 'lamp_ros.policies.act_small.pipeline:pipeline_from_spec',
                       'options': {**written['options'], **options}},
            'weights': {'file': os.path.join(checkpoint, 'model.safetensors')},
            'control': {'rate_hz': 10.0, 'chunker': {'replan_at': 25},
                        'smoother': {'mode': 'none'},
                        'clamp': {'lower': [-3.0] * 3, 'upper': [3.0] * 3,
                                  'max_step': [0.2] * 3}},
            'target': 'cpu',
            'stages': {'default': {'backend': 'host', 'reason': 'test'}}}
    path = tmp_path / 'spec.yaml'
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_the_checkpoint_loads_with_its_stats_and_trained_weights(trained, tmp_path):
    from safetensors.numpy import load_file
    files = sorted(os.listdir(trained))
    assert {'model.safetensors', 'stats.json', 'config.json', 'training.json',
            'loss.png'} <= set(files)
    summary = json.load(open(os.path.join(trained, 'training.json'), encoding='utf-8'))
    assert summary['policy'] == 'act_small' and summary['episodes'] == 2
    assert len(summary['losses_every_10']) == 1 and np.isfinite(summary['final_loss'])
    pipeline = build_pipeline(load_spec(_spec(tmp_path, trained)))
    policy = pipeline.policy
    assert policy.joint_names == ('shoulder', 'elbow', 'wrist')
    weights = load_file(os.path.join(trained, 'model.safetensors'))
    for name, tensor in policy.model.state_dict().items():
        np.testing.assert_array_equal(tensor.numpy(), weights[name])
    image = np.zeros((24, 32, 3), np.uint8)
    chunk = policy.infer({'images': {'base': image, 'wrist': image},
                          'state': np.zeros(3, np.float32)})
    assert chunk.shape == (50, 3) and np.isfinite(chunk).all()


def test_a_checkpoint_the_spec_does_not_describe_is_refused_by_name(trained, tmp_path):
    with pytest.raises(SpecError, match=r'weights.file: .*grid_embed'):
        build_pipeline(load_spec(_spec(tmp_path, trained, grid=4)))
    moved = str(tmp_path / 'no_stats')
    shutil.copytree(trained, moved)
    os.remove(os.path.join(moved, 'stats.json'))
    with pytest.raises(SpecError, match=r'stats.json is missing'):
        build_pipeline(load_spec(_spec(tmp_path, moved)))
