"""Chunk scheduling: latency compensation, replanning, the three merges, state hygiene."""

import json
import math

import numpy as np
import pytest

from lamp_ros.ops.chunker import ActionChunker

DT = 0.1


def _chunker(**kw):
    params = dict(horizon=5, joints=1, dt=DT, replan_at=2)
    params.update(kw)
    return ActionChunker(**params)


def _col(values):
    return np.array(values, dtype=np.float64).reshape(-1, 1)


def _first(chunker):
    """Chunk [0..4] observed at 0.0, arriving at 0.2: the plan is [2, 3, 4] from t=0.2."""
    return chunker.merge(chunker.init_state(), _col([0, 1, 2, 3, 4]), 0.0, 0.2)


def _second(chunker):
    """Chunk [10..14] observed at 0.2, arriving at 0.3: one step elapsed, plan from 0.3."""
    return chunker.merge(_first(chunker), _col([10, 11, 12, 13, 14]), 0.2, 0.3)


def test_latency_drops_elapsed_steps_and_rebases():
    c = _chunker()
    s = _first(c)
    assert s['t0'][0] == pytest.approx(0.2)
    np.testing.assert_array_equal(c.plan(s), _col([2, 3, 4]))
    action, info = c.action_at(s, 0.2)
    assert action.tolist() == [2.0] and info == {'index': 0, 'remaining': 3, 'underrun': False}
    assert c.action_at(s, 0.3)[0].tolist() == [3.0]
    assert c.action_at(s, 0.4)[0].tolist() == [4.0]


def test_underrun_holds_last_action():
    c = _chunker()
    action, info = c.action_at(_first(c), 0.7)
    assert action.tolist() == [4.0]
    assert info == {'index': 5, 'remaining': 0, 'underrun': True}


def test_needs_chunk_thresholds():
    c = _chunker()
    assert c.needs_chunk(c.init_state(), 0.0)
    s = _first(c)  # 3 planned steps from 0.2; replan_at=2 asks when fewer than 2 remain
    assert not c.needs_chunk(s, 0.0)  # before the plan: index clamped to 0, 3 remain
    assert not c.needs_chunk(s, 0.2)  # 3 remain
    assert not c.needs_chunk(s, 0.3)  # 2 remain
    assert c.needs_chunk(s, 0.4)  # 1 remains
    assert c.needs_chunk(s, 0.9)  # underrun
    c3 = _chunker(replan_at=3)
    assert c3.needs_chunk(_first(c3), 0.3)  # 2 < 3


def test_merge_latest():
    c = _chunker(merge_mode='latest')
    s = _second(c)
    np.testing.assert_array_equal(c.plan(s), _col([11, 12, 13, 14]))
    assert c.action_at(s, 0.3)[0].tolist() == [11.0]
    assert s['plan_count'].tolist() == [2, 2, 1, 1, 0]


def test_merge_temporal_ensemble_two_chunks():
    c = _chunker(merge_mode='temporal_ensemble', ensemble_m=0.01)
    s = _second(c)
    w = math.exp(-0.01)  # the new chunk is the second prediction of times 0.3 and 0.4
    expected = [(3 * 1.0 + 11 * w) / (1.0 + w), (4 * 1.0 + 12 * w) / (1.0 + w), 13.0, 14.0]
    np.testing.assert_allclose(c.plan(s)[:, 0], expected, rtol=0, atol=1e-12)
    assert c.action_at(s, 0.3)[0][0] == pytest.approx(6.9800001666650004, abs=1e-12)
    assert s['plan_count'].tolist() == [2, 2, 1, 1, 0]


def test_merge_temporal_ensemble_three_chunks_is_exact_act():
    m = 0.5
    c = _chunker(merge_mode='temporal_ensemble', ensemble_m=m)
    s = c.merge(c.init_state(), _col([0, 1, 2, 3, 4]), 0.0, 0.0)
    s = c.merge(s, _col([10, 11, 12, 13, 14]), 0.1, 0.1)
    s = c.merge(s, _col([20, 21, 22, 23, 24]), 0.2, 0.2)
    w1, w2 = math.exp(-m), math.exp(-2 * m)
    # Time 0.2: A[2] oldest (weight 1), B[1] (e^-m), C[0] (e^-2m).
    assert c.action_at(s, 0.2)[0][0] == pytest.approx((2 + 11 * w1 + 20 * w2) / (1 + w1 + w2))
    assert c.action_at(s, 0.4)[0][0] == pytest.approx((4 + 13 * w1 + 22 * w2) / (1 + w1 + w2))
    # Time 0.5: A has no prediction, so B[4] is the oldest and gets weight 1.
    assert c.action_at(s, 0.5)[0][0] == pytest.approx((14 + 23 * w1) / (1 + w1))
    assert c.action_at(s, 0.6)[0][0] == 24.0
    assert s['plan_count'].tolist() == [3, 3, 3, 2, 1]


def _act_reference(chunks, t, dt, m):
    """ACT by definition: all predictions for time t, weight exp(-m*i), i=0 oldest."""
    preds = []
    for t_obs, chunk in chunks:
        i = int(round((t - t_obs) / dt))
        if 0 <= i < len(chunk):
            preds.append(chunk[i])
    weights = np.exp(-m * np.arange(len(preds)))
    return (weights[:, None] * np.array(preds)).sum(axis=0) / weights.sum()


def test_temporal_ensemble_matches_act_definition_with_latency():
    rng = np.random.default_rng(0)
    c = ActionChunker(horizon=8, joints=3, dt=DT, replan_at=6, ensemble_m=0.3)
    s = c.init_state()
    chunks = []
    for n, latency in enumerate([0, 2, 1, 3, 0, 2]):
        t_obs = n * 2 * DT
        chunk = rng.normal(size=(8, 3))
        s = c.merge(s, chunk, t_obs, t_obs + latency * DT)
        chunks.append((t_obs, chunk))
    t_last = 10 * DT + 2 * DT
    for k in range(6):
        t = t_last + k * DT
        np.testing.assert_allclose(c.action_at(s, t)[0], _act_reference(chunks, t, DT, 0.3),
                                   rtol=0, atol=1e-12)


def test_merge_crossfade_two_steps():
    c = _chunker(merge_mode='crossfade', crossfade_steps=2)
    s = _second(c)
    # Overlap is times 0.3 (old 3, new 11) and 0.4 (old 4, new 12); a = 1/3, 2/3.
    expected = [2 / 3 * 3 + 1 / 3 * 11, 1 / 3 * 4 + 2 / 3 * 12, 13.0, 14.0]
    np.testing.assert_allclose(c.plan(s)[:, 0], expected, rtol=0, atol=1e-12)
    assert c.action_at(s, 0.3)[0][0] == pytest.approx(17 / 3)
    assert c.action_at(s, 0.4)[0][0] == pytest.approx(28 / 3)


def test_merge_crossfade_shorter_than_overlap_then_new_only():
    c = _chunker(merge_mode='crossfade', crossfade_steps=1)
    s = _second(c)
    # L = 1, a_0 = 1/2 at time 0.3; time 0.4 is past the fade: new only.
    np.testing.assert_allclose(c.plan(s)[:, 0], [7.0, 12.0, 13.0, 14.0], rtol=0, atol=1e-12)


def test_crossfade_length_is_capped_by_overlap():
    c = _chunker(merge_mode='crossfade', crossfade_steps=8)
    np.testing.assert_allclose(c.plan(_second(c))[:, 0], [17 / 3, 28 / 3, 13.0, 14.0])


def test_old_plan_fully_elapsed_takes_new_chunk():
    c = _chunker()
    s = c.merge(_first(c), _col([10, 11, 12, 13, 14]), 0.6, 0.6)
    np.testing.assert_array_equal(c.plan(s), _col([10, 11, 12, 13, 14]))
    assert s['plan_count'].tolist() == [1, 1, 1, 1, 1]


@pytest.mark.parametrize('mode', ['latest', 'temporal_ensemble', 'crossfade'])
def test_merge_and_reads_do_not_mutate_state(mode):
    c = _chunker(merge_mode=mode)
    s = _first(c)
    before = {k: v.copy() for k, v in s.items()}
    s2 = c.merge(s, _col([10, 11, 12, 13, 14]), 0.2, 0.3)
    c.action_at(s, 0.3)
    c.needs_chunk(s, 0.3)
    c.plan(s)
    for key in before:
        np.testing.assert_array_equal(s[key], before[key])
        assert s2[key] is not s[key]


def test_init_state_resets():
    c = _chunker()
    s = c.init_state()
    assert sorted(s) == ['plan_count', 'plan_sum', 'plan_wsum', 't0', 'valid']
    assert s['plan_sum'].shape == (5, 1) and s['plan_count'].dtype == np.int64
    assert not s['valid'][0] and c.needs_chunk(s, 1.0)
    assert c.plan(s).shape == (0, 1)
    with pytest.raises(ValueError, match='no plan yet'):
        c.action_at(s, 0.0)


def test_params_round_trip_through_json():
    c = ActionChunker(horizon=50, joints=7, dt=1 / 22, replan_at=20, merge_mode='crossfade',
                      ensemble_m=0.02, crossfade_steps=4)
    d = json.loads(json.dumps(c.to_dict()))
    assert ActionChunker.from_dict(d) == c
    assert d['merge_mode'] == 'crossfade' and d['dt'] == 1 / 22


@pytest.mark.parametrize('d, key', [
    ({'horizon': 5, 'joints': 1, 'dt': 0.1, 'replan_at': 2, 'merge': 'latest'}, 'merge'),
    ({'joints': 1, 'dt': 0.1}, 'horizon'),
])
def test_from_dict_names_bad_key(d, key):
    with pytest.raises(ValueError, match=repr(key)):
        ActionChunker.from_dict(d)


@pytest.mark.parametrize('kw, field', [
    ({'horizon': 0}, 'horizon'),
    ({'joints': 1.5}, 'joints'),
    ({'dt': 0.0}, 'dt'),
    ({'dt': float('nan')}, 'dt'),
    ({'replan_at': 6}, 'replan_at'),
    ({'replan_at': 0}, 'replan_at'),
    ({'merge_mode': 'average'}, 'merge_mode'),
    ({'ensemble_m': 30.0}, 'ensemble_m'),
    ({'crossfade_steps': 0}, 'crossfade_steps'),
])
def test_params_validation_names_field(kw, field):
    with pytest.raises(ValueError, match=field):
        _chunker(**kw)


@pytest.mark.parametrize('chunk', [
    np.zeros((4, 1)),
    np.zeros((5, 2)),
    _col([0, 1, float('nan'), 3, 4]),
    _col([0, 1, 2, float('inf'), 4]),
])
def test_bad_chunk_is_rejected_by_name(chunk):
    c = _chunker()
    with pytest.raises(ValueError, match='chunk'):
        c.merge(c.init_state(), chunk, 0.0, 0.0)


def test_stale_chunk_and_time_reversal_are_rejected():
    c = _chunker()
    with pytest.raises(ValueError, match='stale'):
        c.merge(c.init_state(), _col([0, 1, 2, 3, 4]), 0.0, 0.5)
    with pytest.raises(ValueError, match='t_now'):
        c.merge(c.init_state(), _col([0, 1, 2, 3, 4]), 1.0, 0.5)


def test_state_of_wrong_shape_is_rejected_by_key():
    c = _chunker()
    s = ActionChunker(horizon=6, joints=1, dt=DT, replan_at=2).init_state()
    with pytest.raises(ValueError, match='plan_sum'):
        c.needs_chunk(s, 0.0)
    s = c.init_state()
    s['extra'] = np.zeros(1)
    with pytest.raises(ValueError, match='extra'):
        c.needs_chunk(s, 0.0)


def test_committed_are_the_planned_actions_executed_while_a_chunk_is_computed():
    """Plan [2, 3, 4] from t=0.2; a chunk observed at 0.2 arriving at 0.4 has 2 actions
    committed (those for 0.2 and 0.3); rtc then takes the new chunk as it is (its first
    actions are those)."""
    c = _chunker(merge_mode='rtc')
    s = _first(c)
    np.testing.assert_array_equal(c.committed(s, 0.2, 0.4), _col([2, 3]))
    np.testing.assert_array_equal(c.committed(s, 0.3, 0.9), _col([3, 4]))   # the plan ends
    assert c.committed(s, 0.2, 0.2).shape == (0, 1)                          # no delay
    assert c.committed(s, 0.0, 0.3).shape == (0, 1)                          # before the plan
    assert c.committed(c.init_state(), 0.0, 0.3).shape == (0, 1)             # no plan
    merged = c.merge(s, _col([2, 3, 7, 8, 9]), 0.2, 0.4)
    np.testing.assert_array_equal(c.plan(merged), _col([7, 8, 9]))


def test_rtc_inputs_have_one_shape_whatever_the_delay():
    """What a compiled denoise stage takes: the plan from t_obs on as (H, J), zeros after it;
    the delay (the rows committed); the overlap (the rows the plan has)."""
    c = _chunker(merge_mode='rtc')
    s = _first(c)
    previous, delay, overlap = c.rtc_inputs(s, 0.2, 0.4)
    assert previous.shape == (c.horizon, c.joints) and previous.dtype == np.float32
    assert (delay, overlap) == (2, 3)
    np.testing.assert_array_equal(previous[:3], _col([2, 3, 4]))
    assert not previous[3:].any()
    previous, delay, overlap = c.rtc_inputs(c.init_state(), 0.0, 0.3)
    assert (delay, overlap) == (0, 0) and not previous.any()
    assert c.rtc_inputs(s, 0.0, 0.3)[1:] == (0, 0)   # observed before the plan starts


def test_rtc_settings_are_checked_and_only_with_merge_mode_rtc():
    assert _chunker(merge_mode='rtc').rtc == {'mode': 'trained', 'prefix_schedule': 'linear',
                                              'max_guidance_weight': 10.0,
                                              'execution_horizon': None}
    with pytest.raises(ValueError, match="chunker.rtc: mode 'soft' is unknown"):
        _chunker(merge_mode='rtc', rtc={'mode': 'soft'})
    with pytest.raises(ValueError, match="chunker.rtc: unknown key 'weight'"):
        _chunker(merge_mode='rtc', rtc={'weight': 1})
    with pytest.raises(ValueError, match='max_guidance_weight must be > 0'):
        _chunker(merge_mode='rtc', rtc={'max_guidance_weight': 0})
    with pytest.raises(ValueError, match="only read with merge_mode rtc, not 'latest'"):
        _chunker(merge_mode='latest', rtc={'mode': 'trained'})


def test_control_pipeline_refuses_rtc_for_a_policy_that_cannot():
    from lamp_ros.control import control_pipeline
    from lamp_ros.observation import PolicyInterface

    class NoRtc:
        interface = PolicyInterface(('base',), ('j0',), prompt=False, action_horizon=5)

    control = {'rate_hz': 10.0, 'chunker': {'merge_mode': 'rtc', 'replan_at': 2},
               'clamp': {'lower': [-1.0], 'upper': [1.0], 'max_step': [0.1]}}
    with pytest.raises(ValueError, match='rtc.mode trained: NoRtc cannot generate a chunk'):
        control_pipeline(NoRtc(), control)
