"""Safety clamp: step limit, joint limits, their order, NaN refusal, state hygiene."""

import json

import numpy as np
import pytest

from lamp_ros.ops.clamp import SafetyClamp


def _clamp():
    return SafetyClamp(lower=(-1.0, 0.0, -2.0), upper=(1.0, 2.0, 2.0), max_step=(0.1, 0.5, 1.0))


def test_first_step_without_reference_only_clips_limits():
    c = _clamp()
    y, info, state = c.step(c.init_state(), [5.0, 1.0, -3.0])
    assert y.tolist() == [1.0, 1.0, -2.0]
    assert info == {'clamped_joints': [0, 2], 'step_limited': False, 'limit_hit': True}
    assert state['prev'].tolist() == [1.0, 1.0, -2.0] and state['has_prev'][0]


def test_first_step_is_limited_around_reference():
    c = _clamp()
    y, info, _ = c.step(c.init_state(), [0.5, 1.2, 0.5], reference=[0.0, 1.0, 0.0])
    # Joint 0: 0.0 + 0.1; joint 1: within 0.5 of 1.0; joint 2: within 1.0 of 0.0.
    assert y.tolist() == [0.1, 1.2, 0.5]
    assert info == {'clamped_joints': [0], 'step_limited': True, 'limit_hit': False}


def test_previous_command_wins_over_reference():
    c = _clamp()
    _, _, state = c.step(c.init_state(), [0.0, 1.0, 0.0])
    y, info, state = c.step(state, [-0.5, 0.2, 1.5], reference=[-0.5, 0.2, 1.5])
    assert y.tolist() == [-0.1, 0.5, 1.0]
    assert info == {'clamped_joints': [0, 1, 2], 'step_limited': True, 'limit_hit': False}
    y, _, _ = c.step(state, [-0.5, 0.2, 1.5])
    np.testing.assert_allclose(y, [-0.2, 0.2, 1.5], rtol=0, atol=1e-12)


def test_limits_apply_after_step_limit():
    c = _clamp()
    _, _, state = c.step(c.init_state(), [0.95, 1.9, 0.0])
    y, info, _ = c.step(state, [3.0, 1.95, 0.0])
    # Joint 0: step allows 1.05, the limit caps it at 1.0.
    assert y.tolist() == [1.0, 1.95, 0.0]
    assert info == {'clamped_joints': [0], 'step_limited': True, 'limit_hit': True}


def test_reference_outside_limits_still_ends_inside():
    c = _clamp()
    y, info, _ = c.step(c.init_state(), [0.0, 1.0, 0.0], reference=[-3.0, 1.0, 0.0])
    # Step-limited to -2.9 around the reference, then the limit lifts it to -1.0.
    assert y.tolist() == [-1.0, 1.0, 0.0]
    assert info == {'clamped_joints': [0], 'step_limited': True, 'limit_hit': True}


@pytest.mark.parametrize('bad, joint', [(float('nan'), 1), (float('inf'), 2), (-np.inf, 0)])
def test_non_finite_command_is_refused_naming_joint(bad, joint):
    c = _clamp()
    x = [0.0, 0.0, 0.0]
    x[joint] = bad
    _, _, state = c.step(c.init_state(), [0.0, 0.5, 0.0])
    before = {k: v.copy() for k, v in state.items()}
    with pytest.raises(ValueError, match=rf'x\[{joint}\]'):
        c.step(state, x)
    for key in before:
        np.testing.assert_array_equal(state[key], before[key])


def test_bad_reference_is_refused_when_used():
    c = _clamp()
    with pytest.raises(ValueError, match=r'reference\[1\]'):
        c.step(c.init_state(), [0.0, 0.0, 0.0], reference=[0.0, float('nan'), 0.0])
    with pytest.raises(ValueError, match='x must have shape'):
        c.step(c.init_state(), [0.0, 0.0])


def test_step_does_not_mutate_state():
    c = _clamp()
    _, _, state = c.step(c.init_state(), [0.0, 1.0, 0.0])
    before = {k: v.copy() for k, v in state.items()}
    y, _, new = c.step(state, [0.5, 1.5, 0.5])
    for key in before:
        np.testing.assert_array_equal(state[key], before[key])
        assert new[key] is not state[key]
    y[0] = 9.0
    assert new['prev'][0] == 0.1


def test_init_state_resets():
    c = _clamp()
    _, _, state = c.step(c.init_state(), [0.0, 1.0, 0.0])
    assert c.step(state, [0.5, 1.0, 0.0])[0].tolist()[0] == 0.1
    fresh = c.init_state()
    assert not fresh['has_prev'][0]
    assert c.step(fresh, [0.5, 1.0, 0.0])[0].tolist()[0] == 0.5


def test_params_round_trip_and_scalar_max_step():
    c = _clamp()
    assert SafetyClamp.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    d = {'lower': [-1, -1], 'upper': [1, 1], 'max_step': 0.2}
    assert SafetyClamp.from_dict(d).max_step == (0.2, 0.2)
    assert SafetyClamp.from_dict(d).to_dict()['max_step'] == [0.2, 0.2]


@pytest.mark.parametrize('d, key', [
    ({'lower': [0.0], 'upper': [1.0], 'max_step': 0.1, 'min_step': 0.0}, 'min_step'),
    ({'lower': [0.0], 'upper': [1.0]}, 'max_step'),
])
def test_from_dict_names_bad_key(d, key):
    with pytest.raises(ValueError, match=repr(key)):
        SafetyClamp.from_dict(d)


@pytest.mark.parametrize('kw, message', [
    ({'lower': (0.0, 3.0)}, r'lower\[1\]=3.0 is above upper\[1\]'),
    ({'max_step': (0.1, 0.0)}, r'max_step\[1\] must be > 0'),
    ({'max_step': (0.1, -1.0)}, r'max_step\[1\] must be > 0'),
    ({'upper': (1.0,)}, 'upper must have shape'),
    ({'max_step': (0.1, 0.1, 0.1)}, 'max_step must have shape'),
    ({'lower': (0.0, float('nan'))}, r'lower\[1\]'),
    ({'lower': ()}, 'lower must not be empty'),
    ({'max_step': 0.1}, 'max_step must be a list'),
])
def test_params_validation_names_field(kw, message):
    params = dict(lower=(-1.0, -1.0), upper=(1.0, 1.0), max_step=(0.1, 0.1))
    params.update(kw)
    with pytest.raises(ValueError, match=message):
        SafetyClamp(**params)
