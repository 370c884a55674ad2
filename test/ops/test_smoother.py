"""Command filters: EMA and one-euro by hand-computed numbers, state hygiene, validation."""

import json
import math

import numpy as np
import pytest

from lamp_ros.ops.smoother import Smoother

# One-euro smoothing factor at 1 Hz for te = 0.1 s: r = 2*pi*1*0.1, a = r / (r + 1).
A_1HZ = 0.38586954509503757


def _run(smoother, samples, times):
    state = smoother.init_state()
    out = []
    for x, t in zip(samples, times):
        y, state = smoother.step(state, x, t)
        out.append(y.tolist())
    return out, state


def test_none_passes_through():
    out, _ = _run(Smoother(mode='none', joints=2), [[0.0, 1.0], [5.0, -5.0]], [0.0, 0.1])
    assert out == [[0.0, 1.0], [5.0, -5.0]]


def test_ema_sequence():
    out, _ = _run(Smoother(mode='ema', joints=1, alpha=0.5), [[0.0], [1.0], [1.0]],
                  [0.0, 0.1, 0.2])
    assert out == [[0.0], [0.5], [0.75]]


def test_ema_alpha_weights_new_sample():
    out, _ = _run(Smoother(mode='ema', joints=1, alpha=0.25), [[4.0], [0.0], [8.0]],
                  [0.0, 0.1, 0.2])
    # 4 -> 0.25*0 + 0.75*4 = 3 -> 0.25*8 + 0.75*3 = 4.25
    assert out == [[4.0], [3.0], [4.25]]


def test_one_euro_with_beta_zero_is_a_fixed_low_pass():
    assert A_1HZ == pytest.approx(2 * math.pi * 0.1 / (2 * math.pi * 0.1 + 1), abs=1e-15)
    s = Smoother(mode='one_euro', joints=1, min_cutoff=1.0, beta=0.0)
    out, _ = _run(s, [[0.0], [1.0], [1.0]], [0.0, 0.1, 0.2])
    # y1 = a*1 = 0.385869...; y2 = a*1 + (1-a)*y1 = 1 - (1-a)^2 = 0.622843...
    np.testing.assert_allclose(out, [[0.0], [0.38586954509503757], [0.622843784358224]],
                               rtol=0, atol=1e-12)


def test_one_euro_speed_raises_cutoff():
    s = Smoother(mode='one_euro', joints=1, min_cutoff=1.0, beta=1.0, d_cutoff=1.0)
    out, state = _run(s, [[0.0], [1.0]], [0.0, 0.1])
    # dx = 10, dx_hat = a_d*10 = 3.8587; cutoff = 1 + 3.8587 = 4.8587 Hz;
    # r = 2*pi*4.8587*0.1 = 3.0528, a = r/(r+1) = 0.75326; y = a*1.
    assert state['dx_hat'][0] == pytest.approx(3.8586954509503757, abs=1e-12)
    assert out[1][0] == pytest.approx(0.7532575181149229, abs=1e-12)


def test_one_euro_derivative_uses_previous_raw_sample():
    s = Smoother(mode='one_euro', joints=1, min_cutoff=1.0, beta=1.0, d_cutoff=1.0)
    out, state = _run(s, [[0.0], [1.0], [1.0]], [0.0, 0.1, 0.2])
    # Raw x did not change, so dx = 0 and dx_hat = (1 - a_d) * 3.8587 = 2.3697;
    # cutoff = 3.3697 Hz, a = 0.67921; y = a*1 + (1 - a)*0.75326 = 0.92085.
    assert state['dx_hat'][0] == pytest.approx(2.3697423926318635, abs=1e-12)
    assert out[2][0] == pytest.approx(0.9208466523247839, abs=1e-12)


def test_one_euro_non_increasing_time_holds_output():
    s = Smoother(mode='one_euro', joints=1)
    _, state = _run(s, [[0.0], [1.0]], [0.0, 0.1])
    before = {k: v.copy() for k, v in state.items()}
    for t in (0.1, 0.05):
        y, new = s.step(state, [9.0], t)
        assert y[0] == pytest.approx(A_1HZ)
        for key in before:
            np.testing.assert_array_equal(new[key], before[key])


def test_joints_are_filtered_independently():
    s = Smoother(mode='one_euro', joints=2)
    out, _ = _run(s, [[0.0, 5.0], [1.0, 5.0]], [0.0, 0.1])
    np.testing.assert_allclose(out[1], [A_1HZ, 5.0], rtol=0, atol=1e-12)


@pytest.mark.parametrize('mode', ['none', 'ema', 'one_euro'])
def test_step_does_not_mutate_state(mode):
    s = Smoother(mode=mode, joints=1)
    _, state = _run(s, [[0.0], [1.0]], [0.0, 0.1])
    before = {k: v.copy() for k, v in state.items()}
    y, new = s.step(state, [3.0], 0.2)
    for key in before:
        np.testing.assert_array_equal(state[key], before[key])
        assert new[key] is not state[key]
    y[0] = 100.0
    assert new['y'][0] != 100.0


def test_init_state_resets():
    s = Smoother(mode='ema', joints=1, alpha=0.5)
    _, state = _run(s, [[0.0], [1.0]], [0.0, 0.1])
    assert s.step(state, [4.0], 0.2)[0].tolist() == [2.25]  # 0.5*4 + 0.5*0.5
    y, _ = s.step(s.init_state(), [4.0], 0.2)
    assert y.tolist() == [4.0]


def test_params_round_trip_through_json():
    s = Smoother(mode='one_euro', joints=7, alpha=0.3, min_cutoff=2.0, beta=0.1,
                 d_cutoff=1.5)
    assert Smoother.from_dict(json.loads(json.dumps(s.to_dict()))) == s


@pytest.mark.parametrize('d, key', [
    ({'mode': 'ema', 'joints': 1, 'cutoff': 1.0}, 'cutoff'),
    ({'mode': 'ema'}, 'joints'),
])
def test_from_dict_names_bad_key(d, key):
    with pytest.raises(ValueError, match=repr(key)):
        Smoother.from_dict(d)


@pytest.mark.parametrize('kw, field', [
    ({'mode': 'kalman'}, 'mode'),
    ({'joints': 0}, 'joints'),
    ({'alpha': 0.0}, 'alpha'),
    ({'alpha': 1.5}, 'alpha'),
    ({'min_cutoff': 0.0}, 'min_cutoff'),
    ({'beta': -1.0}, 'beta'),
    ({'d_cutoff': -1.0}, 'd_cutoff'),
    ({'beta': float('nan')}, 'beta'),
])
def test_params_validation_names_field(kw, field):
    params = dict(mode='one_euro', joints=1)
    params.update(kw)
    with pytest.raises(ValueError, match=field):
        Smoother(**params)


@pytest.mark.parametrize('x, message', [
    ([float('nan')], r'x\[0\] is nan'),
    ([float('inf')], r'x\[0\] is inf'),
    ([1.0, 2.0], r'x must have shape \(1,\)'),
])
def test_bad_sample_is_rejected_by_name(x, message):
    s = Smoother(mode='ema', joints=1)
    with pytest.raises(ValueError, match=message):
        s.step(s.init_state(), x, 0.0)
