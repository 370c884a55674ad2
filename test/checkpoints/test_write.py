"""A Pi05Model written as a LeRobot checkpoint (checkpoint/write.py) comes back through
`lamp import`'s reader with the same actions, in the layout LeRobot itself writes (the
fixtures of test/data/checkpoints were saved by LeRobot 0.6.1)."""

from dataclasses import replace
import json
import os

import numpy as np
import torch

from lamp_ros.ops.normalize import Normalizer
from lamp_ros.ops.tokenizer import Tokenizer
from lamp_ros.policies.pi05 import assets
from lamp_ros.policies.pi05.checkpoint import keys
from lamp_ros.policies.pi05.checkpoint.reader import open_checkpoint
from lamp_ros.policies.pi05.checkpoint.write import feature_stats, lerobot_heads, write_lerobot
from lamp_ros.policies.pi05.config import get_preset
from lamp_ros.policies.pi05.model import Pi05Model
from lamp_ros.policies.pi05.policy import GlueConfig, Pi05Policy, RobotIO
from lamp_ros.policies.pi05.weights import init_weights
from conftest import CHECKPOINTS

LEROBOT = os.path.join(CHECKPOINTS, 'lerobot_pi05_tiny')
JOINTS = tuple(f'joint{i + 1}' for i in range(7))


def demo_shaped(seed: int = 0) -> Pi05Model:
    """pi05_tiny with the head layout a LeRobot checkpoint can say, as the demo policy."""
    model = Pi05Model(lerobot_heads(replace(get_preset('pi05_tiny'), max_token_len=64)))
    init_weights(model, seed)
    return model.eval()


def test_every_parameter_name_goes_to_lerobot_and_back():
    with torch.device('meta'):
        model = Pi05Model(get_preset('pi05_full'))
    names = [n for n, _ in model.named_parameters()]
    written = {keys.lerobot_name(n) for n in names}
    assert all(keys.lamp_name(keys.lerobot_name(n)) == n for n in names)
    with open(os.path.join(CHECKPOINTS, 'lerobot_pi05_full_keys.json'), encoding='utf-8') as f:
        lerobot = set(json.load(f)['tensors'])
    # LeRobot's stock pi05 has exactly these tensors, plus the two lm_heads write.py adds
    assert lerobot - written == {'model.' + n for n in keys.UNUSED}
    assert written <= lerobot


def test_a_written_checkpoint_imports_with_the_same_actions(tmp_path):
    rng = np.random.default_rng(0)
    states = rng.uniform(-1, 1, (200, 7)).astype(np.float32)
    actions = (states + rng.normal(0, 0.1, states.shape)).astype(np.float32)
    stats = {'observation.state': feature_stats(states), 'action': feature_stats(actions)}
    model = demo_shaped()
    write_lerobot(str(tmp_path), model, stats, 'test tokenizer')

    ckpt = open_checkpoint(str(tmp_path), 'lerobot')
    assert ckpt.joints == 7 and ckpt.prompt_format == 'lerobot'
    assert ckpt.config.llm == model.cfg.llm and ckpt.config.expert == model.cfg.expert
    assert ckpt.config.vision == model.cfg.vision
    assert ckpt.config.max_token_len == model.cfg.max_token_len
    imported = Pi05Policy.from_checkpoint(ckpt, assets.tokenizer_path(), JOINTS)
    normalizers = [Normalizer('quantiles', {k: stats[f][k] for k in ('q01', 'q99')}, 'lerobot')
                   for f in ('observation.state', 'action')]
    original = Pi05Policy(model.cfg, model, Tokenizer(assets.tokenizer_path()),
                          RobotIO(JOINTS, *normalizers), GlueConfig(prompt_format='lerobot'))
    obs = original.example_observation(seed=3)
    noise = np.random.default_rng(1).standard_normal((50, 32)).astype(np.float32)
    np.testing.assert_array_equal(imported.infer(obs, noise), original.infer(obs, noise))


def test_the_files_are_laid_out_as_lerobot_writes_them(tmp_path):
    stats = {f: feature_stats(np.random.default_rng(0).uniform(-1, 1, (50, 7)))
             for f in ('observation.state', 'action')}
    files = write_lerobot(str(tmp_path), demo_shaped(), stats, 'test tokenizer')
    assert sorted(files) == sorted(os.listdir(LEROBOT))

    def read(folder, name):
        with open(os.path.join(folder, name), encoding='utf-8') as f:
            return json.load(f)
    assert set(read(tmp_path, 'config.json')) == set(read(LEROBOT, 'config.json'))
    for name in ('policy_preprocessor.json', 'policy_postprocessor.json'):
        ours, theirs = read(tmp_path, name), read(LEROBOT, name)
        assert [s['registry_name'] for s in ours['steps']] == \
            [s['registry_name'] for s in theirs['steps']]
        assert [set(s['config']) for s in ours['steps']] == \
            [set(s['config']) for s in theirs['steps']]
    from safetensors.numpy import load_file
    for name in files:
        if name.endswith('processor.safetensors'):
            assert set(load_file(tmp_path / name)) == set(load_file(os.path.join(LEROBOT, name)))


def test_a_model_whose_heads_lerobot_cannot_say_is_refused(tmp_path):
    import pytest
    model = Pi05Model(get_preset('pi05_tiny'))
    stats = {f: feature_stats(np.zeros((4, 7))) for f in ('observation.state', 'action')}
    with pytest.raises(ValueError,
                       match='llm.head_dim 32, expert.head_dim 32, vision.num_heads 4'):
        write_lerobot(str(tmp_path), model, stats, 'test tokenizer')
