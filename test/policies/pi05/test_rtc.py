"""Real-time chunking, trained mode, in the eager model (policies/pi05/rtc.py): the committed
actions are kept exactly, no delay is plain sampling, and the trained demo policy continues from
a committed prefix instead of ignoring it (what its RTC-delay training was for)."""

import numpy as np
import pytest
import torch
from conftest import DEMO_SPEC

from lamp_ros.policies.pi05.rtc import inpaint
from lamp_ros.sim.scene import render
from lamp_ros.spec import load_spec
from lamp_ros.trace.from_spec import build_pipeline


@pytest.fixture(scope='module')
def demo_cache():
    """The demo policy's expert and its KV cache for one view of the task."""
    policy = build_pipeline(load_spec(DEMO_SPEC)).policy
    q = np.zeros(7)
    q[0] = -0.6
    images = {s: render(s, 320, 240, 1.0, q, 0.62) for s in policy.config.camera_slots}
    bins = policy.discretize_state(policy.normalize_state(q.astype(np.float32)))
    ids, mask = policy.tokenize('pick up the red cube and place it in the bowl', bins)
    pixels, image_mask = policy.stack_cameras(
        {s: policy.preprocess_image(i, camera=s) for s, i in images.items()})
    model = policy.model
    with torch.no_grad():
        cache = model.prefix(model.vision(torch.from_numpy(pixels)),
                             torch.from_numpy(image_mask), torch.from_numpy(ids).long(),
                             torch.from_numpy(mask))
    return model.expert, cache


def _noise(seed: int):
    return torch.randn(1, 50, 32, generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def test_no_delay_is_plain_sampling_and_the_committed_actions_are_kept(demo_cache):
    expert, cache = demo_cache
    free = expert(*cache, _noise(0))
    torch.testing.assert_close(inpaint(expert, *cache, _noise(0), free, 0), free,
                               atol=1e-5, rtol=1e-5)
    committed = free + 0.3
    out = inpaint(expert, *cache, _noise(1), committed, 6)
    assert torch.equal(out[:, :6], committed[:, :6])


@torch.no_grad()
def test_the_trained_policy_continues_from_the_committed_actions(demo_cache):
    """Shift the committed prefix of joint 1 up or down: the actions right after it follow."""
    expert, cache = demo_cache
    free = expert(*cache, _noise(0))
    after = {}
    for offset in (-0.5, 0.0, 0.5):
        committed = free.clone()
        committed[:, :6, 0] += offset
        after[offset] = float(inpaint(expert, *cache, _noise(1), committed, 6)[0, 6, 0])
    assert after[0.5] > after[0.0] + 0.1 and after[-0.5] < after[0.0] - 0.1, after


def test_a_delay_outside_the_chunk_is_refused(demo_cache):
    expert, cache = demo_cache
    with pytest.raises(ValueError, match='delay 51: must be within 0..50'):
        inpaint(expert, *cache, _noise(0), _noise(1), 51)
    with pytest.raises(ValueError, match='committed has 3 actions, the delay needs 4'):
        inpaint(expert, *cache, _noise(0), _noise(1)[:, :3], 4)


def _rtc_spec():
    from lamp_ros.sim.evaluate import spec_with_merge_mode
    return spec_with_merge_mode(DEMO_SPEC, 'rtc')


def test_the_policy_starts_its_chunk_with_the_committed_actions():
    pipeline = build_pipeline(_rtc_spec())
    obs = pipeline.example_observation(seed=2)
    free = pipeline.policy.infer(obs)
    committed = free[:5] + 0.05
    chunk = pipeline.policy.infer(obs, committed=committed)
    np.testing.assert_allclose(chunk[:5], committed, atol=1e-5)   # through normalisation
    with pytest.raises(ValueError, match=r'committed: expected \(d, 7\)'):
        pipeline.policy.infer(obs, committed=committed[:, :3])


def test_rtc_runs_in_closed_loop_in_the_eager_pipeline():
    """lamp eval's loop with a 4-tick latency: each chunk is generated around the actions the
    arm executed meanwhile (ControlPipeline asks the chunker for them), and the task is done."""
    from lamp_ros.sim.evaluate import EagerController, evaluate
    report = evaluate(EagerController(build_pipeline(_rtc_spec())), episodes=3, seconds=6.0,
                      latency_ticks=4, seed=0)
    assert report['success_rate'] >= 2 / 3, report['success_rate']


def test_no_artifact_claims_rtc_yet(tiny_artifact):
    """The eager pipeline runs rtc; compiling it, or switching an artifact to it, is refused
    with the reason (its model stages were not built for committed actions)."""
    from lamp_ros.runtime import Runtime
    from lamp_ros.trace.from_spec import trace_pipeline
    pipeline = build_pipeline(_rtc_spec())
    with pytest.raises(ValueError, match='merge_mode rtc: the eager pipeline runs it'):
        trace_pipeline(pipeline, pipeline.example_observation(), export=False)
    with pytest.raises(ValueError, match='merge_mode rtc: this artifact\'s model stages'):
        Runtime.load(tiny_artifact, overrides={'chunker': {'merge_mode': 'rtc'}})
