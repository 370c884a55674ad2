"""Real-time chunking, trained mode, in the eager model (policies/pi05/rtc.py): the committed
actions are kept exactly, no delay is plain sampling, and the trained demo policy continues from
a committed prefix instead of ignoring it (what its RTC-delay training was for)."""

import numpy as np
import pytest
import torch
from conftest import DEMO_SPEC

from lamp_ros.policies.pi05.rtc import GuidedExpert, guided, inpaint, prefix_weights
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


def test_prefix_weights_follow_the_schedules():
    """1 before the delay, a ramp to the end of the overlap, 0 after (the RTC paper's soft
    mask; here delay 2, end 6, horizon 10)."""
    torch.testing.assert_close(prefix_weights(2, 6, 10, 'linear'),
                               torch.tensor([1, 1, .8, .6, .4, .2, 0, 0, 0, 0]))
    exp = prefix_weights(2, 6, 10, 'exp')
    assert exp[:2].tolist() == [1, 1] and exp[6:].sum() == 0
    assert (exp[2:6] < prefix_weights(2, 6, 10, 'linear')[2:6]).all()
    assert prefix_weights(2, 6, 10, 'ones').tolist() == [1] * 6 + [0] * 4
    assert prefix_weights(2, 6, 10, 'zeros').tolist() == [1] * 2 + [0] * 8
    with pytest.raises(ValueError, match="prefix_schedule 'soft'"):
        prefix_weights(2, 6, 10, 'soft')


def test_guidance_pulls_the_chunk_toward_the_previous_one_and_nothing_is_plain(demo_cache):
    """Guided mode (for checkpoints not trained with delays): no weight is plain sampling; a
    previous chunk offset by +0.3 pulls the guided chunk's overlap toward it, more than the
    actions after it. Only partly: guidance acts through how the predicted clean actions
    depend on x_t, and this near-deterministic policy predicts almost the same chunk from any
    x_t (the reason a policy trained for RTC inpaints instead)."""
    expert, cache = demo_cache
    with torch.no_grad():
        free = expert(*cache, _noise(0))
    previous = free.clone()
    previous[..., :7] += 0.3
    torch.testing.assert_close(guided(expert, *cache, _noise(0), previous, 0, 0, 'zeros'),
                               free, atol=1e-5, rtol=1e-5)
    pulled = guided(expert, *cache, _noise(0), previous, 5, 20, 'linear')
    gap_before = (previous - free)[:, :5, :7].abs().mean()
    gap_after = (previous - pulled)[:, :5, :7].abs().mean()
    assert gap_after < 0.95 * gap_before, (gap_before, gap_after)
    assert (pulled - free)[:, 30:, :7].abs().mean() < (pulled - free)[:, :5, :7].abs().mean()


def test_guided_mode_refuses_an_export_across_prompt_lengths(demo_cache):
    """The guided stage's gradient graph is traced at fixed shapes: an export that makes the
    prompt length dynamic (the cuda backend's fusion.text_lengths) is refused by name."""
    expert, (k, v, mask) = demo_cache
    stage = GuidedExpert(expert).eval()
    noise = _noise(0)
    args = (k, v, mask, noise, noise.clone(), torch.tensor(5), torch.tensor(20))
    length = torch.export.Dim('length', min=8, max=k.shape[2])
    dynamic = ({2: length}, {2: length}, {1: length}, None, None, None, None)
    with pytest.raises(ValueError, match=r'leave fusion.text_lengths empty \(\[\]\) for rtc '
                                         'mode guided'):
        torch.export.export(stage, args, strict=False, dynamic_shapes=dynamic)


def test_the_policy_starts_its_chunk_with_the_committed_actions():
    pipeline = build_pipeline(load_spec(DEMO_SPEC))
    obs = pipeline.example_observation(seed=2)
    free = pipeline.policy.infer(obs)
    committed = free[:5] + 0.05
    chunk = pipeline.policy.infer(obs, committed=committed)
    np.testing.assert_allclose(chunk[:5], committed, atol=1e-5)   # through normalisation
    padded = np.zeros_like(free)
    padded[:5] = committed
    pipeline.policy.state['noise']['counter'][:] = 1   # the noise of the call before
    np.testing.assert_array_equal(pipeline.policy.infer(obs, committed=padded, delay=5), chunk)
    with pytest.raises(ValueError, match=r'committed: expected \(d <= 50, 7\)'):
        pipeline.policy.infer(obs, committed=committed[:, :3])
    with pytest.raises(ValueError, match='delay 51: must be within 0..50'):
        pipeline.policy.infer(obs, committed=padded, delay=51)


def test_rtc_runs_in_closed_loop_in_the_eager_pipeline():
    """lamp eval's loop with a 4-tick latency: each chunk is generated around the actions the
    arm executed meanwhile (ControlPipeline asks the chunker for them), and the task is done."""
    from lamp_ros.sim.evaluate import EagerController, evaluate
    report = evaluate(EagerController(build_pipeline(load_spec(DEMO_SPEC))), episodes=3,
                      seconds=6.0, latency_ticks=4, seed=0)
    assert report['success_rate'] >= 2 / 3, report['success_rate']


def _view(slots, seed: int = 0):
    q = np.zeros(7)
    q[0] = -0.6 + 0.1 * seed
    return {'images': {s: render(s, 320, 240, 1.0, q, 0.62) for s in slots},
            'state': q.astype(np.float32),
            'prompt': 'pick up the red cube and place it in the bowl'}


def test_the_artifact_generates_around_committed_actions_as_the_eager_policy(demo_artifact):
    """The demo artifact (merge_mode rtc) takes the committed actions and the delay as graph
    inputs; its chunk keeps them and matches the eager policy's within the spec's tolerance."""
    from lamp_ros.runtime import Runtime
    runtime = Runtime.load(demo_artifact)
    assert runtime.rtc and {'committed', 'delay'} <= set(runtime.artifact.graph.inputs)
    policy = build_pipeline(load_spec(DEMO_SPEC)).policy
    obs = _view(runtime.camera_slots)
    free = runtime.infer(obs)
    committed = free[:7] + 0.04
    runtime.reset()
    chunk = runtime.infer(obs, committed=committed)
    np.testing.assert_allclose(chunk[:7], committed, atol=1e-5)
    policy.reset()
    eager = policy.infer(obs, committed=committed)
    np.testing.assert_allclose(chunk, eager, atol=1e-4, rtol=1e-3)
    assert np.abs(chunk[7:] - free[7:]).max() > 1e-3   # the rest follows the committed ones


def test_parity_compares_chunks_generated_around_committed_actions(demo_artifact):
    """Parity's samples run delays 0, 5, 10, 15 (compiler/parity.py), and lamp verify re-runs
    them from the stored committed actions."""
    import json
    import os

    from safetensors.numpy import load_file

    from lamp_ros.whitebox.verify import verify_artifact
    evidence = json.load(open(os.path.join(demo_artifact, 'evidence', 'parity.json')))
    assert evidence['passed'] and 'normalize_actions.committed' in evidence['worst']
    inputs = load_file(os.path.join(demo_artifact, 'evidence', 'parity_inputs.safetensors'))
    assert [inputs[f'{i}/rtc_delay_end'].tolist() for i in range(4)] == [
        [0, 20], [5, 25], [10, 30], [15, 35]]                       # delay, end of guidance
    assert all(inputs[f'{i}/committed'].shape == (50, 7) for i in range(4))
    assert all(check.passed for check in verify_artifact(demo_artifact)), \
        [c for c in verify_artifact(demo_artifact) if not c.passed]


def test_the_runtime_commits_the_actions_due_while_it_infers(demo_artifact):
    """Sync ticks whose observation is 4 ticks old: once there is a plan, each chunk is made
    around the 4 actions due meanwhile, and the profile says so."""
    from lamp_ros.runtime import Runtime
    runtime = Runtime.load(demo_artifact)
    period = runtime.period
    delays = []
    for k in range(40):
        t = 4 * period + k * period
        runtime.step(_view(runtime.camera_slots), t, t - 4 * period)
        if runtime.last_inferred:
            delays.append(runtime.last_delay)
    assert delays[0] == 0 and set(delays[1:]) == {4}, delays
    assert runtime.profile()['rtc']['delay'] == 4


def test_an_rtc_artifact_runs_the_other_modes_and_others_refuse_rtc(
        demo_artifact, tiny_artifact):
    from lamp_ros.runtime import Runtime
    latest = Runtime.load(demo_artifact, overrides={'chunker': {'merge_mode': 'latest'}})
    for k in range(30):
        latest.step(_view(latest.camera_slots), (k + 4) * latest.period, k * latest.period)
        if latest.last_inferred:
            assert latest.last_delay == 0   # no committed actions: plain sampling
    with pytest.raises(ValueError, match="merge_mode rtc: this artifact's denoise stage does "
                                         'not take the committed actions'):
        Runtime.load(tiny_artifact, overrides={'chunker': {'merge_mode': 'rtc'}})
    plain = Runtime.load(tiny_artifact)
    with pytest.raises(ValueError, match='not built for real-time chunking'):
        plain.feeds(_view(plain.camera_slots), 0.0, committed=np.zeros((2, 7)))


def test_guided_mode_compiles_and_matches_the_eager_pipeline(tiny_variant):
    """pi05_tiny (two flow steps) with rtc mode guided: the denoise stage's backward pass
    (rtc.GuidedExpert's ATen graph) exported to ONNX Runtime; parity at delays 0-15 passed,
    lamp verify repeats it, and a chunk pulled toward a previous plan matches the eager
    pipeline's, built from the artifact's own spec."""
    import json
    import os

    from lamp_ros.runtime import Runtime
    from lamp_ros.spec.model_spec import parse_spec
    from lamp_ros.whitebox.verify import verify_artifact
    artifact = tiny_variant('rtc_guided')
    evidence = json.load(open(os.path.join(artifact, 'evidence', 'parity.json')))
    assert evidence['passed'], evidence['worst']
    assert all(check.passed for check in verify_artifact(artifact))
    runtime = Runtime.load(artifact)
    assert runtime.guided and 'guidance_end' in runtime.artifact.graph.inputs
    obs = _view(runtime.camera_slots)
    previous = runtime.infer(obs) + 0.05
    runtime.reset()
    chunk = runtime.infer(obs, committed=previous, delay=5, end=20)
    with open(os.path.join(artifact, 'spec.json'), encoding='utf-8') as f:
        policy = build_pipeline(parse_spec(json.load(f))).policy
    assert policy.config.num_steps == 2
    eager = policy.infer(obs, committed=previous, delay=5, guidance={
        'end': 20, 'schedule': 'linear', 'max_weight': 10.0})
    np.testing.assert_allclose(chunk, eager, atol=1e-4, rtol=1e-3)
    with pytest.raises(ValueError, match='built for rtc mode guided'):
        Runtime.load(artifact, overrides={'chunker': {'merge_mode': 'rtc',
                                                      'rtc': {'mode': 'trained'}}})
