"""The eager tiny policy: shapes, determinism, camera masks, input sizes, bad input."""

import numpy as np
import pytest
import torch

from lamp_ros.ops.prompt import format_prompt
from lamp_ros.policies.pi05.policy import Pi05Policy
from lamp_ros.policies.pi05.weights import load_weights, save_weights


@pytest.fixture(scope='module')
def policy():
    return Pi05Policy.create('pi05_tiny', seed=0)


@pytest.fixture
def obs(policy):
    return policy.example_observation(seed=1)


def test_chunk_shape_and_finite(policy, obs):
    actions = policy.infer(obs)
    assert actions.shape == (50, 7)
    assert actions.dtype == np.float32
    assert np.isfinite(actions).all()


def test_deterministic_for_seed_and_noise(obs):
    a = Pi05Policy.create('pi05_tiny', seed=3)
    b = Pi05Policy.create('pi05_tiny', seed=3)
    # Same seed -> same weights and same noise stream.
    np.testing.assert_array_equal(a.infer(obs), b.infer(obs))
    noise = np.random.default_rng(7).standard_normal((50, 32)).astype(np.float32)
    np.testing.assert_array_equal(a.infer(obs, noise), b.infer(obs, noise))
    # Another seed gives other weights, hence other actions for the same noise.
    c = Pi05Policy.create('pi05_tiny', seed=4)
    assert np.abs(c.infer(obs, noise) - a.infer(obs, noise)).max() > 1e-3


def test_noise_drives_the_flow(policy, obs):
    n1 = np.random.default_rng(1).standard_normal((50, 32)).astype(np.float32)
    n2 = np.random.default_rng(2).standard_normal((50, 32)).astype(np.float32)
    assert np.abs(policy.infer(obs, n1) - policy.infer(obs, n2)).max() > 1e-3


def test_missing_camera_is_masked_not_zero_filled_silently(policy, obs):
    images = {k: policy.preprocess_image(v, camera=k) for k, v in obs['images'].items()
              if k != 'right_wrist'}
    pixels, mask = policy.stack_cameras(images)
    assert mask.tolist() == [[True, True, False]]
    # Whatever sits in the masked slot cannot reach the actions.
    other = pixels.copy()
    other[0, 2] = 180
    ids, tmask = policy.tokenize(obs['prompt'], np.arange(7))
    noise = np.random.default_rng(0).standard_normal((1, 50, 32)).astype(np.float32)

    def run(pix, cam_mask):
        return policy.denoise(*policy.prefix(policy.vision(pix), cam_mask, ids, tmask), noise)

    torch.testing.assert_close(run(pixels, mask), run(other, mask), rtol=0, atol=1e-6)
    # The mask is what does it: with the slot switched on, the content changes the actions.
    assert (run(other, np.ones_like(mask)) - run(pixels, mask)).abs().max() > 1e-4
    # The public path accepts the observation without that camera.
    obs_missing = dict(obs, images={k: v for k, v in obs['images'].items() if k in images})
    assert policy.infer(obs_missing).shape == (50, 7)


@pytest.mark.parametrize('h,w', [(480, 640), (224, 224), (720, 1280), (100, 60)])
def test_any_image_size_accepted(policy, h, w):
    obs = policy.example_observation(seed=2, sizes={'base': (h, w)})
    assert policy.infer(obs).shape == (50, 7)


def test_prompt_carries_discretised_state(policy, obs):
    bins = policy.discretize_state(policy.normalize_state(obs['state']))
    assert bins.shape == (7,) and bins.min() >= 0 and bins.max() <= 255
    text = format_prompt(obs['prompt'], bins)
    assert text == (f'Task: {obs["prompt"]}, State: {" ".join(str(int(b)) for b in bins)};'
                    '\nAction: ')
    ids, mask = policy.tokenize(obs['prompt'], bins)
    assert ids.shape == mask.shape == (1, policy.config.max_token_len)
    decoded = policy.tokenizer.decode(ids[0][mask[0]].tolist())
    assert decoded == text


def test_state_at_quantiles_maps_to_end_bins(policy):
    stats = policy.robot.state.stats
    assert policy.discretize_state(policy.normalize_state(stats['q01'])).tolist() == [0] * 7
    assert policy.discretize_state(policy.normalize_state(stats['q99'])).tolist() == [255] * 7


@pytest.mark.parametrize('mutate,field', [
    (lambda o: o['images'].__setitem__('base', o['images']['base'].astype(np.float32)),
     "images['base']"),
    (lambda o: o['images'].__setitem__('base', o['images']['base'][..., :2]), "images['base']"),
    (lambda o: o['images'].__setitem__('base', o['images']['base'][0]), "images['base']"),
    (lambda o: o['images'].__setitem__('top', o['images']['base']), "images['top']"),
    (lambda o: o['state'].__setitem__(2, np.nan), 'state'),
    (lambda o: o.__setitem__('state', o['state'][:5]), 'state'),
    (lambda o: o.__setitem__('prompt', 42), 'prompt'),
    (lambda o: o.__setitem__('images', {}), 'images'),
    (lambda o: o.__setitem__('prompt', 'go ' * 200), 'prompt'),
])
def test_bad_observation_names_the_field(policy, obs, mutate, field):
    mutate(obs)
    with pytest.raises(ValueError) as err:
        policy.infer(obs)
    assert str(err.value).startswith(field), str(err.value)


def test_bad_noise_is_refused(policy, obs):
    with pytest.raises(ValueError, match='noise'):
        policy.infer(obs, np.zeros((10, 32), np.float32))
    with pytest.raises(ValueError, match='noise'):
        policy.infer(obs, np.full((50, 32), np.nan, np.float32))


def test_safetensors_round_trip(tmp_path, policy, obs):
    path = str(tmp_path / 'w.safetensors')
    save_weights(policy.model, path)
    reloaded = Pi05Policy.create('pi05_tiny', weights=path)
    noise = np.random.default_rng(5).standard_normal((50, 32)).astype(np.float32)
    np.testing.assert_array_equal(reloaded.infer(obs, noise), policy.infer(obs, noise))


def test_weights_file_mismatch_is_named(tmp_path, policy):
    path = tmp_path / 'w.safetensors'
    save_weights(policy.model, str(path))
    full_cfg_model = Pi05Policy.create('pi05_tiny', seed=1).model
    del full_cfg_model.expert.action_out_proj  # a model that lacks one tensor
    with pytest.raises(ValueError, match='unexpected tensors'):
        load_weights(full_cfg_model, str(path))
    path.write_bytes(b'not a safetensors file')
    with pytest.raises(ValueError, match='cannot read safetensors'):
        load_weights(policy.model, str(path))


def test_stage_seed_changes_only_that_stage():
    a = Pi05Policy.create('pi05_tiny', seed=0).model.state_dict()
    b = Pi05Policy.create('pi05_tiny', seed=0, stage_seeds={'vision': 99}).model.state_dict()
    changed = {k.split('.')[0] for k in a if not torch.equal(a[k], b[k])}
    assert changed == {'vision'}


def test_stages_filled_on_threads_equal_one_after_another():
    """init_weights fills the stages concurrently; each stage's own generator makes the values
    those of the stages filled in turn, bit for bit (the artifact ids rely on it)."""
    from lamp_ros.policies.pi05.weights import init_stage, stage_seeds, STAGES
    threaded = Pi05Policy.create('pi05_tiny', seed=3).model
    serial = Pi05Policy.create('pi05_tiny', seed=5).model
    seeds = stage_seeds(3)
    for name in STAGES:
        init_stage(getattr(serial, name), seeds[name])
    a, b = threaded.state_dict(), serial.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
