"""Real checkpoints in: LeRobot's and openpi's pi0.5 layouts imported, compiled and matched
against what the upstream code computed (test/data/checkpoints, made by LeRobot 0.6.1 itself:
scripts/fixtures/make_pi05_checkpoints.py). openpi's glue in the fixture is transcribed from
openpi at commit 15a9616a00943ada6c20a0f158e3adb39df2ccac (src/openpi/transforms.py,
src/openpi/models/tokenizer.py, src/openpi/policies/policy_config.py)."""

import json
import os

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import load_file

from conftest import (CHECKPOINT_FOLDERS as FORMATS, CHECKPOINT_JOINTS as JOINTS,
                      CHECKPOINTS as DATA, import_checkpoint_spec as import_spec)
from lamp_ros.cli import main as lamp
from lamp_ros.runtime import Runtime


def cases() -> list:
    """(observation, noise, {fmt.key: expected}) per fixture case."""
    path = os.path.join(DATA, 'expected.safetensors')
    values = load_file(path)
    with safe_open(path, 'np') as f:
        meta = json.loads(f.metadata()['cases'])['cases']
    out = []
    for i, case in enumerate(meta):
        obs = {'images': {cam: values[f'{i}.image.{cam}'] for cam in case['cameras']},
               'state': values[f'{i}.state'], 'prompt': case['task']}
        expected = {k[len(f'{i}.'):]: v for k, v in values.items() if k.startswith(f'{i}.')}
        out.append((obs, values[f'{i}.noise'], expected))
    return out


@pytest.fixture(params=sorted(FORMATS))
def imported(request, build_imported):
    """(format, spec, artifact) per checkpoint format."""
    return (request.param, *build_imported(request.param))


def test_the_artifact_computes_what_upstream_computed(imported):
    """Token ids exactly, normalised and robot-unit actions within 1e-4 of LeRobot's (or
    openpi's glue around the same network), case by case as one episode: call n draws noise n,
    as the fixture's noise rule does (lamp's rng([0, n]))."""
    fmt, _, artifact = imported
    runtime = Runtime.load(artifact)
    assert runtime.joint_names == tuple(JOINTS.split(','))
    assert runtime.camera_slots == ('base_0_rgb', 'left_wrist_0_rgb', 'right_wrist_0_rgb')
    runtime.reset()
    for i, (obs, noise, expected) in enumerate(cases()):
        capture = {}
        chunk = runtime.infer(obs, capture=capture)
        np.testing.assert_array_equal(capture['sample_noise.noise'][0], noise[0])
        np.testing.assert_array_equal(capture['tokenize.token_ids'][0],
                                      expected[f'{fmt}.token_ids'], err_msg=f'case {i}')
        np.testing.assert_array_equal(capture['tokenize.token_mask'][0],
                                      expected[f'{fmt}.token_mask'], err_msg=f'case {i}')
        np.testing.assert_allclose(capture['normalize_state.state'],
                                   expected[f'{fmt}.norm_state'], atol=1e-6, rtol=0)
        np.testing.assert_allclose(capture['denoise.actions'][0, :, :6],
                                   expected[f'{fmt}.actions_normalized'], atol=1e-4, rtol=0,
                                   err_msg=f'case {i}')
        assert chunk.shape == expected[f'{fmt}.actions'].shape == (10, 6)
        np.testing.assert_allclose(chunk, expected[f'{fmt}.actions'], atol=1e-4, rtol=0,
                                   err_msg=f'case {i}')


def test_joint_names_name_the_interface_and_change_no_number(
        lerobot_sim_artifact, build_imported):
    """`lamp import --joint-names`: the artifact's interface names the joints given, in order
    (here six of the simulated arm's: the artifact vla_node drives over DDS in
    test/node/test_any_policy.py, so built in the parallel phase), and it computes what the
    same checkpoint imported under other names computes."""
    other = Runtime.load(build_imported('lerobot')[1])
    runtime = Runtime.load(lerobot_sim_artifact)
    assert runtime.joint_names == tuple(f'joint{i}' for i in range(1, 7))
    assert other.joint_names == tuple(JOINTS.split(','))
    runtime.reset()
    other.reset()
    for obs, _, _ in cases():
        np.testing.assert_array_equal(runtime.infer(obs), other.infer(obs))


def test_the_fixture_exercises_what_differs_between_code_bases():
    """The cases cover a task with capitals, `_` and a newline, a state below q01 (LeRobot's
    bin -1), a missing camera and a prompt over the token budget (truncated)."""
    (obs0, _, e0), (obs1, _, e1), (obs2, _, e2) = cases()
    assert any(c.isupper() for c in obs0['prompt']) and '_' in obs0['prompt']
    assert len(obs1['images']) == 2
    assert e1['lerobot.norm_state'].min() < -1
    assert e2['lerobot.token_mask'].all()  # 48 tokens: cut at the budget


def test_import_report_and_spec(tmp_path, capsys):
    spec = import_spec('lerobot', tmp_path)
    out = capsys.readouterr().out
    for text in ('format        lerobot', 'vision 2x64 (patch 28, 224 px, mlp 128)',
                 'prefix 2x96 (mlp 192, 2 heads, 1 kv, head_dim 256)', 'expert 2x48',
                 'vocab 512', 'never read: model.paligemma_with_expert.gemma_expert.lm_head',
                 'base_0_rgb, left_wrist_0_rgb, right_wrist_0_rgb (token order)',
                 '6 joints (model action dim 32), horizon 10', 'QUANTILES (lerobot eps)',
                 'lerobot format, up to 48 tokens', '512 pieces, sha256',
                 'config.json names gemma_2b (width 2048); the tensors have width 96'):
        assert text in out, text
    import yaml
    with open(spec, encoding='utf-8') as f:
        data = yaml.safe_load(f)
    assert data['policy']['options']['preset'] == 'from_weights'
    assert data['weights']['format'] == 'lerobot'
    assert not os.path.isabs(data['weights']['path'])  # relative to the spec's folder
    assert len(data['policy']['options']['tokenizer']['sha256']) == 64


def test_provenance_inspect_and_diff(imported, tmp_path, capsys):
    fmt, _, artifact = imported
    with open(os.path.join(artifact, 'provenance.json'), encoding='utf-8') as f:
        prov = json.load(f)
    assert prov['format'] == fmt and 'model.safetensors' in prov['files']
    assert prov['tensors']['prefix.embed.weight'].endswith(
        'embed_tokens.weight' if fmt == 'lerobot' else 'lm_head.weight')  # openpi: tied
    assert lamp(['inspect', artifact]) == 0
    assert f'weights from a {fmt} checkpoint' in capsys.readouterr().out


def test_diff_names_the_checkpoint(build_imported, capsys):
    arts = {fmt: build_imported(fmt)[1] for fmt in FORMATS}
    assert lamp(['diff', arts['lerobot'], arts['openpi'], '--json']) == 0
    report = json.loads(capsys.readouterr().out)
    assert 'checkpoint' in report['changed']
    assert report['checkpoint']['format'] == ['lerobot', 'openpi']


def test_a_bf16_checkpoint_compiles_for_the_cpu(tmp_path, capsys):
    """LeRobot's bf16 mode stores most weights in bf16 and the vision tower in fp32: for the
    CPU the eager reference is float32 (exact for both), ONNX Runtime runs fp32, and the
    provenance says what was stored and what was cast."""
    import shutil

    import torch
    from safetensors.torch import load_file as load_torch, save_file as save_torch

    folder = tmp_path / 'lerobot_bf16'
    shutil.copytree(os.path.join(DATA, FORMATS['lerobot']), folder)
    path = str(folder / 'model.safetensors')
    tensors = {k: v if 'vision_tower' in k else v.to(torch.bfloat16)
               for k, v in load_torch(path).items()}
    save_torch(tensors, path)
    spec = str(tmp_path / 'bf16.yaml')
    assert lamp(['import', str(folder), '--tokenizer', os.path.join(DATA, 'tokenizer.model'),
                 '--out', spec]) == 0
    assert 'weights       bfloat16' in capsys.readouterr().out
    assert lamp(['compile', spec, '--out', str(tmp_path / 'art')]) == 0
    with open(tmp_path / 'art' / 'provenance.json', encoding='utf-8') as f:
        prov = json.load(f)
    assert (prov['stored_dtype'], prov['model_dtype']) == ('bfloat16', 'float32')
    assert prov['cast_tensors'] > 50
    obs, _, expected = cases()[0]
    chunk = Runtime.load(str(tmp_path / 'art')).infer(obs)
    # the same network with bf16-rounded weights: close to the fp32 checkpoint's actions
    assert np.abs(chunk - expected['lerobot.actions']).max() < 0.1


@pytest.mark.parametrize('mode', ['QUANTILES', 'QUANTILE10', 'MIN_MAX', 'MEAN_STD', 'IDENTITY'])
def test_every_lerobot_normalisation_mode_as_lerobot_computes_it(mode):
    """lamp's Normalizer against LeRobot's own NormalizerProcessorStep /
    UnnormalizerProcessorStep (values in the fixture), a zero-range dimension included."""
    from lamp_ros.ops.normalize import MODES, Normalizer
    values = load_file(os.path.join(DATA, 'expected.safetensors'))
    for key, what, method in (('observation.state', 'state_normalized', 'normalize'),
                              ('action', 'actions_unnormalized', 'unnormalize')):
        stats = {name: values[f'modes.stats.{key}.{name}'] for name in MODES[mode.lower()]}
        normalizer = Normalizer(mode.lower(), stats, 'lerobot')
        given = values['modes.state' if method == 'normalize' else 'modes.actions']
        np.testing.assert_allclose(getattr(normalizer, method)(given),
                                   values[f'modes.{mode}.{what}'], rtol=1e-6, atol=1e-6,
                                   err_msg=f'{mode} {key}')


def test_import_with_a_robot_file(tmp_path, capsys):
    """--robot: the spec names the robot file (its joints, limits and cameras); a robot of
    another joint count is refused naming both."""
    import yaml
    sim7 = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(DATA))), 'config',
                        'robots', 'sim7.yaml')
    arm = tmp_path / 'arm.yaml'
    arm.write_text(yaml.safe_dump({
        'name': 'six', 'joints': [{'name': f'j{i}', 'lower': -1.0, 'upper': 1.0,
                                   'max_step': 0.1} for i in range(6)],
        'cameras': {'base_0_rgb': {'topic': '/cam/image_raw', 'encoding': 'bgr8',
                                   'width': 640, 'height': 480}}}))
    spec = str(tmp_path / 'spec.yaml')
    assert lamp(['import', os.path.join(DATA, FORMATS['lerobot']), '--tokenizer',
                 os.path.join(DATA, 'tokenizer.model'), '--robot', str(arm), '--out',
                 spec]) == 0
    from lamp_ros.spec import load_spec
    from lamp_ros.trace.from_spec import build_pipeline
    loaded = load_spec(spec)
    assert loaded.robot.joint_names == tuple(f'j{i}' for i in range(6))
    assert loaded.control['clamp']['max_step'] == [0.1] * 6
    assert build_pipeline(loaded).policy.joint_names == loaded.robot.joint_names
    capsys.readouterr()
    assert lamp(['import', os.path.join(DATA, FORMATS['lerobot']), '--tokenizer',
                 os.path.join(DATA, 'tokenizer.model'), '--robot', sim7, '--out', spec]) == 2
    err = capsys.readouterr().err
    assert '7 joints' in err and 'the checkpoint has 6' in err
