"""Quantile normalisation and the stats file that carries it."""

import json

import numpy as np
import pytest

from lamp_ros.ops.normalize import (
    NormStats, pad_to_dim, quantile_normalize, quantile_unnormalize,
    QuantileStats)
from lamp_ros.policies.pi05.assets import norm_stats_path


def _stats():
    return QuantileStats(q01=np.array([-2.0, 0.0, 1.0]), q99=np.array([2.0, 0.08, 1.0]))


def _bundled_dict():
    with open(norm_stats_path()) as f:
        return json.load(f)


def test_quantile_stats_are_float32_and_read_only():
    stats = _stats()
    assert stats.q01.dtype == np.float32 and stats.q99.dtype == np.float32
    with pytest.raises(ValueError):
        stats.q01[0] = 5.0


@pytest.mark.parametrize('q01, q99, key', [
    ([0.0, 1.0], [1.0], 'q99'),
    ([0.0, np.nan], [1.0, 1.0], 'q01'),
    ([0.0, 2.0], [1.0, 1.0], 'q99'),
])
def test_quantile_stats_validation(q01, q99, key):
    with pytest.raises(ValueError, match=key):
        QuantileStats(q01=np.array(q01), q99=np.array(q99))


def test_normalize_exact_values():
    stats = _stats()
    x = np.array([[-2.0, 0.0, 1.0], [2.0, 0.08, 1.0], [0.0, 0.04, 3.0]], dtype=np.float32)
    out = quantile_normalize(x, stats)
    assert out.dtype == np.float32
    expected = np.array([
        [-1.0, -1.0, -1.0],
        [2 * 4.0 / (4.0 + 1e-6) - 1, 2 * 0.08 / (0.08 + 1e-6) - 1, -1.0],
        [2 * 2.0 / (4.0 + 1e-6) - 1, 2 * 0.04 / (0.08 + 1e-6) - 1, 2 * 2.0 / 1e-6 - 1],
    ])
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    assert abs(out[1, 1] - 0.999975) < 1e-5


def test_unnormalize_exact_values():
    stats = _stats()
    out = quantile_unnormalize(np.array([-1.0, 0.0, 1.0], dtype=np.float32), stats)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [-2.0, 0.04 + 0.5e-6, 1.0 + 1e-6], rtol=1e-6)


def test_round_trip_on_chunks():
    stats = NormStats.load(norm_stats_path()).actions
    rng = np.random.default_rng(1)
    x = rng.uniform(stats.q01, stats.q99, size=(2, 50, 7)).astype(np.float32)
    back = quantile_unnormalize(quantile_normalize(x, stats), stats)
    assert back.shape == (2, 50, 7)
    np.testing.assert_allclose(back, x, atol=1e-5)


def test_normalize_rejects_wrong_width():
    with pytest.raises(ValueError, match='last axis must be 3'):
        quantile_normalize(np.zeros((4, 7)), _stats())


def test_load_bundled():
    stats = NormStats.load(norm_stats_path())
    assert stats.joint_names == (
        'joint1', 'joint2', 'joint3', 'joint4', 'joint5', 'joint6', 'gripper')
    assert stats.state.q01.shape == (7,) and stats.actions.q99.shape == (7,)
    assert stats.state.q01[6] == 0.0 and stats.state.q99[6] == np.float32(0.08)
    assert np.all(np.abs(stats.actions.q01[:6]) <= 2.6)
    assert NormStats.load(norm_stats_path()).to_dict() == stats.to_dict()


def test_to_dict_round_trip():
    stats = NormStats.load(norm_stats_path())
    d = json.loads(json.dumps(stats.to_dict()))
    again = NormStats.from_dict(d)
    np.testing.assert_array_equal(again.actions.q99, stats.actions.q99)
    assert again.joint_names == stats.joint_names


@pytest.mark.parametrize('edit, key', [
    (lambda d: d.pop('actions'), 'norm_stats.actions'),
    (lambda d: d['actions'].pop('q99'), 'norm_stats.actions.q99'),
    (lambda d: d['actions']['q99'].pop(), 'norm_stats.actions.q99'),
    (lambda d: d['state'].__setitem__('q01', 'abc'), 'norm_stats.state.q01'),
    (lambda d: d['state']['q01'].__setitem__(2, 5.0), 'norm_stats.state.q99'),
    (lambda d: d['joint_names'].pop(), 'norm_stats.state.q01'),
    (lambda d: d.__setitem__('joint_names', 'joint1'), 'norm_stats.joint_names'),
])
def test_bad_keys_are_named(edit, key):
    d = _bundled_dict()
    edit(d)
    with pytest.raises(ValueError, match=key.replace('.', r'\.')):
        NormStats.from_dict(d)


def test_load_bad_file(tmp_path):
    path = tmp_path / 'stats.json'
    path.write_text('{not json')
    with pytest.raises(ValueError, match='stats.json'):
        NormStats.load(str(path))
    with pytest.raises(ValueError, match='missing.json'):
        NormStats.load(str(tmp_path / 'missing.json'))


def test_pad_to_dim():
    x = np.arange(14, dtype=np.float32).reshape(2, 7)
    out = pad_to_dim(x, 32)
    assert out.shape == (2, 32) and out.dtype == np.float32
    np.testing.assert_array_equal(out[:, :7], x)
    assert not out[:, 7:].any()
    assert pad_to_dim(x, 7).shape == (2, 7)
    with pytest.raises(ValueError, match='larger than dim=6'):
        pad_to_dim(x, 6)
