"""Runtime execution: parity with the eager reference, arenas, async ticks, memory, profile."""

import json
import time

import numpy as np
import pytest

from lamp_ros.spec import load_spec
from lamp_ros.ops.normalize import NormStats
from lamp_ros.policies.pi05.example import example_observation
from lamp_ros.policies.pi05.pipeline import pipeline_from_spec
from lamp_ros.runtime import Runtime
from lamp_ros.runtime.loop import run_ticks
from lamp_ros.policies.pi05.assets import norm_stats_path

SPEC = 'config/specs/pi05_tiny_random.yaml'


@pytest.fixture(scope='module')
def pipeline():
    return pipeline_from_spec(load_spec(SPEC))


def test_runtime_matches_eager_on_20_observations(tiny_artifact, pipeline):
    runtime = Runtime.load(tiny_artifact)
    spec = load_spec(SPEC)
    atol, rtol = spec.parity['atol'], spec.parity['rtol']
    stats = NormStats.load(norm_stats_path())
    for seed in range(20):
        sizes = {'base': (480 + 8 * seed, 640), 'left_wrist': (224, 224)}
        if seed % 2:
            sizes['right_wrist'] = (300, 200)
        obs = example_observation(stats, seed=200 + seed, sizes=sizes)
        pipeline.reset()
        runtime.reset()
        captured = {}
        command = runtime.run(runtime.feeds(obs, 0.0), capture=captured)['clamp.command']
        pipeline.policy.reset()
        chunk = pipeline.policy.infer(obs)
        np.testing.assert_allclose(captured['unnormalize_actions.chunk'], chunk,
                                   atol=atol, rtol=rtol)
        pipeline.reset()
        np.testing.assert_allclose(command, pipeline.tick(obs, 0.0), atol=atol, rtol=rtol)


def test_a_deployment_rate_sets_the_period_the_chunker_step_and_the_deadline(tiny_artifact):
    """One source for the rate: the artifact's (abi.rate_hz) unless the deployment gives
    another (vla_node's rate_hz); then the chunker steps and every tick's deadline follow it."""
    assert Runtime.load(tiny_artifact).period == pytest.approx(1 / 22.0)
    runtime = Runtime.load(tiny_artifact, rate_hz=30.0)
    assert runtime.rate_hz == 30.0 and runtime.period == pytest.approx(1 / 30.0)
    assert runtime._chunker[1].dt == pytest.approx(1 / 30.0)
    assert runtime.profile()['rate_hz'] == 30.0
    assert runtime.profiler.tick(0.040, runtime.period)  # 40 ms misses a 33 ms period...
    assert not runtime.profiler.tick(0.040, 1 / 22.0)    # ...not a 45 ms one
    with pytest.raises(ValueError, match='rate_hz: must be > 0'):
        Runtime.load(tiny_artifact, rate_hz=0.0)


def test_planned_values_live_in_the_arena(tiny_artifact):
    runtime = Runtime.load(tiny_artifact)
    arena = runtime.arena
    run_ticks(runtime, 1, realtime=False)
    chunk = arena.view('unnormalize_actions.chunk')
    assert np.shares_memory(chunk, arena.buffers['cpu.inference'])
    # ONNX Runtime wrote its output straight into the planned view (IOBinding).
    actions = arena.view('denoise.actions')
    assert np.abs(actions).sum() > 0 and np.shares_memory(actions,
                                                          arena.buffers['cpu.inference'])
    state = runtime.state.get('chunker')['plan_sum']
    assert np.shares_memory(state, arena.buffers['cpu.state'])
    assert arena.nbytes == sum(a['arena_bytes'] for a in runtime.artifact.memory['arenas'])


def test_inference_only_when_the_chunker_asks(tiny_artifact):
    runtime = Runtime.load(tiny_artifact)
    commands = run_ticks(runtime, 30, realtime=False)
    profile = runtime.profile()
    assert profile['ticks'] == 30
    assert profile['inference']['count'] == 2  # tick 0 and once 25 actions are used
    assert all(c is not None and np.isfinite(c).all() for _, c in commands)


def test_reset_replays_the_episode(tiny_artifact):
    runtime = Runtime.load(tiny_artifact)
    first = [c for _, c in run_ticks(runtime, 5, realtime=False)]
    runtime.reset()
    again = [c for _, c in run_ticks(runtime, 5, realtime=False)]
    np.testing.assert_array_equal(first, again)


def _slow(runtime, seconds):
    """Make inference artificially slow: wrap the compiled group's runner (a test double)."""
    for _, runner in runtime.inference_runners:
        if hasattr(runner, 'session'):
            real = runner.run

            def slow(*args, _real=real, **kwargs):
                time.sleep(seconds)
                return _real(*args, **kwargs)
            runner.run = slow


@pytest.mark.timing
def test_async_ticks_keep_their_rate_with_slow_inference(tiny_artifact):
    """Inference made three periods slow runs in the worker: ticks never wait for it and a new
    chunk always arrives before the plan runs out. What a loaded two-core machine cannot
    promise is a tick within one period (a tick descheduled by a busy neighbour overruns by
    itself); a tick that waited for inference would take the whole inference, so a tick under
    half of it shows that none did."""
    runtime = Runtime.load(tiny_artifact, execution='async')
    slow_s = 3 * runtime.period
    _slow(runtime, slow_s)
    obs = example_observation(NormStats.load(norm_stats_path()))
    chunker_id, chunker = runtime._chunker
    period, durations, served, underruns = runtime.period, [], [], 0
    start = time.perf_counter()
    for k in range(90):  # about 4 s at 22 Hz
        delay = start + k * period - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        t0 = time.perf_counter()
        command = runtime.step(obs, k * period)
        durations.append(time.perf_counter() - t0)
        served.append(command)
        if command is not None:
            _, info = chunker.action_at(runtime.state.get(chunker_id), k * period)
            underruns += info['underrun']
    runtime.close()
    elapsed = time.perf_counter() - start
    first = next(i for i, c in enumerate(served) if c is not None)
    assert first <= 6  # the first chunk needs ~3 ticks of inference
    assert all(c is not None and np.isfinite(c).all() for c in served[first:])
    assert underruns == 0  # a new chunk always arrived before the plan ran out
    assert max(durations) < 0.5 * slow_s, max(durations)  # ticks never waited for inference
    # most ticks take a sliver of the period; an overrun is a tick the machine descheduled
    assert np.median(durations) < 0.25 * period, np.median(durations)
    assert elapsed < 90 * period + 0.5 * slow_s  # the loop kept its schedule
    profile = runtime.profile()
    # the runtime counts as misses only ticks that overran their period (timed inside step)
    assert profile['deadline_misses'] <= sum(d > period for d in durations)
    assert profile['inference']['count'] >= 3
    assert profile['inference']['p50_ms'] >= slow_s * 1e3


def _rss_kb() -> int:
    with open('/proc/self/status') as f:
        return int(next(line for line in f if line.startswith('VmRSS')).split()[1])


def test_no_memory_growth_over_1000_steps(tiny_artifact):
    runtime = Runtime.load(tiny_artifact, profile_window=100)
    obs = example_observation(NormStats.load(norm_stats_path()))
    for k in range(100):  # warm up: allocator pools, ORT arenas, caches
        runtime.step(obs, k / 22.0)
    before = _rss_kb()
    for k in range(100, 1100):
        runtime.step(obs, k / 22.0)
    growth_mb = (_rss_kb() - before) / 1024
    assert growth_mb < 8, f'RSS grew by {growth_mb:.1f} MB over 1000 steps'


def test_profile_is_plain_data_and_traces_load(tiny_artifact, tmp_path):
    runtime = Runtime.load(tiny_artifact)
    run_ticks(runtime, 3, realtime=False)
    profile = runtime.profile()
    json.dumps(profile)  # plain data
    for key in ('p50_ms', 'p90_ms', 'p99_ms', 'max_ms', 'count'):
        assert key in profile['tick']
    assert set(profile['groups']) == {g.name for g in runtime.artifact.plan.groups}
    assert profile['nodes']['tokenize']['count'] == 1
    path = tmp_path / 'trace.json'
    runtime.write_trace(str(path))
    events = json.loads(path.read_text())['traceEvents']
    complete = [e for e in events if e['ph'] == 'X']
    assert {'tick', 'inference', 'group:g03_onnxruntime', 'node:clamp'} <= \
        {e['name'] for e in complete}
    assert all(e['dur'] >= 0 and e['ts'] >= 0 for e in complete)


def test_profiler_counts_deadline_misses():
    from lamp_ros.runtime.profiler import Profiler
    p = Profiler(window=3)
    assert p.tick(0.010, 0.045) is False
    assert p.tick(0.050, 0.045) is True
    for ms in (1, 2, 3, 4):
        p.record('tick', 0.0, ms / 1e3)
    s = p.stats('tick')
    assert s['count'] == 4 and s['p50_ms'] == pytest.approx(3.0) and s['max_ms'] == 4.0
    assert p.profile()['deadline_misses'] == 1


def test_lookahead_keeps_the_plan_within_the_max_step_from_the_command(tiny_artifact):
    """A multi-point trajectory's points obey the clamp's limits and its max step per tick,
    starting from the command just sent (what the node publishes with trajectory_points)."""
    runtime = Runtime.load(tiny_artifact)
    clamp = next(n.attrs for n in runtime.artifact.graph.nodes if n.op == 'clamp')
    command = runtime.step(example_observation(NormStats.load(norm_stats_path())), 0.0)
    start = np.asarray(command) + 0.5                        # far from the plan on purpose
    rows = runtime.lookahead(0.0, 20, start=start)
    step = np.broadcast_to(np.asarray(clamp['max_step'], float), start.shape)
    assert len(rows) == 20
    assert np.all(np.abs(np.diff(np.vstack([start, rows]), axis=0)) <= step + 1e-12)
    free = runtime.lookahead(0.0, 20)
    assert not np.allclose(free, rows)
