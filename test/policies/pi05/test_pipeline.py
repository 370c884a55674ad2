"""The eager control pipeline: inference only when the chunker asks, safe commands, reset."""

import numpy as np
import pytest

from lamp_ros.spec import load_spec
from lamp_ros.policies.pi05.pipeline import pipeline_from_spec


@pytest.fixture(scope='module')
def pipeline():
    return pipeline_from_spec(load_spec('config/specs/pi05_tiny_random.yaml'))


def _inferences(pipeline) -> int:
    return int(pipeline.policy.state['noise']['counter'][0])


def test_ticks_infer_only_when_the_chunker_asks(pipeline):
    pipeline.reset()
    obs = pipeline.policy.example_observation()
    dt = 1.0 / pipeline.rate_hz
    commands = [pipeline.tick(obs, k * dt) for k in range(30)]
    # replan_at=25 of 50: a new chunk at tick 0 and again once 25 actions were used.
    assert _inferences(pipeline) == 2
    cmd = np.array(commands)
    assert cmd.shape == (30, 7) and np.isfinite(cmd).all()
    clamp = pipeline.clamper
    assert (cmd >= np.array(clamp.lower) - 1e-12).all()
    assert (cmd <= np.array(clamp.upper) + 1e-12).all()
    steps = np.abs(np.diff(cmd, axis=0))
    assert (steps <= np.array(clamp.max_step) + 1e-9).all()


def test_reset_replays_the_episode(pipeline):
    obs = pipeline.policy.example_observation(seed=4)
    pipeline.reset()
    first = [pipeline.tick(obs, k / 22.0) for k in range(3)]
    pipeline.reset()
    again = [pipeline.tick(obs, k / 22.0) for k in range(3)]
    np.testing.assert_array_equal(first, again)
    assert _inferences(pipeline) == 1


def test_control_parameters_must_match_the_robot():
    spec = load_spec('config/specs/pi05_tiny_random.yaml')
    control = dict(spec.control, clamp={'lower': [-1] * 6, 'upper': [1] * 6, 'max_step': 0.1})
    bad = type(spec)(**{**spec.__dict__, 'control': control})
    with pytest.raises(ValueError, match='control.clamp: 6 joints, the policy has 7'):
        pipeline_from_spec(bad)
