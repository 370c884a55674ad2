"""Deterministic replay: a recording's ticks through an artifact, on the bag's own timeline.

The bag's inputs go to the same ControlEngine the node runs (same conversion, input checks and
hold on faults) and the engine ticks at the recorded tick times; each produced command is
compared with the recorded one joint by joint (|a - b| <= atol + rtol * |b|). No wall clock.

With the node's own records in the bag (regress/recording.py, node/records.py) the replay
runs what the node ran:

- each tick reads exactly the inputs the node used (found by header stamp), in the session's
  configuration (prompt, topics, joint names, overrides, rate);
- an asynchronous node's inferences start at the recorded ticks and their chunks are merged at
  the recorded ticks with the recorded durations (regress/schedule.py), so the plan, the noise
  counter and real-time chunking's delay follow the recording;
- a recording that starts mid-episode continues from the episode state the node published
  after its first merged chunk in the bag (runtime/episode_state.py); the commands before it
  are counted, not compared. An episode whose start the bag holds is replayed from its start.

An input the recorder lost (sensor topics are best effort) is replaced by the newest older one
of the same input and counted (`inputs_substituted`); the commands before the first one are also
judged on their own (`exact_commands`, `exact_passed`). A bag without the node's records (an
older node, another recorder) is replayed in receive order, which is exact for a `sync` node.

`localize` runs two artifacts side by side on the same ticks and names the first node, in
topological order, whose output differs.
"""

import json
import math

import numpy as np

from lamp_ros.node.engine import ControlEngine
from lamp_ros.observation import DEFAULT_PROMPT
from lamp_ros.regress import topics
from lamp_ros.regress.bag import BagError
from lamp_ros.regress.recording import bag_layout, read_recording, stamp_index
from lamp_ros.regress.rerun import feed_received, feed_stamped, rerun
from lamp_ros.regress.schedule import RecordedSchedule

__all__ = ('bag_layout', 'compare_commands', 'localize', 'replay')


def compare_commands(produced, expected, atol: float, rtol: float, times) -> dict:
    """Per-joint comparison of two command sequences (None = no command at that tick, or, as
    the expected one, nothing to compare)."""
    errors, first, within, total = [], None, 0, 0
    for i, (got, want) in enumerate(zip(produced, expected)):
        if want is None:
            continue
        want = np.asarray(want, np.float64)
        got = np.full_like(want, np.nan) if got is None else np.asarray(got, np.float64)
        err = np.abs(got - want)
        ok = err <= atol + rtol * np.abs(want)  # NaN (no command produced) is never ok
        within += int(ok.sum())
        total += ok.size
        errors.append(float(np.nanmax(err)) if np.isfinite(err).any() else math.inf)
        if first is None and not ok.all():
            j = int(np.argmin(ok))
            first = {'index': i, 't': float(times[i]), 'joint': j, 'expected': float(want[j]),
                     'got': None if math.isnan(got[j]) else float(got[j]),
                     'abs_error': None if math.isnan(err[j]) else float(err[j])}
    max_err = max(errors) if errors else 0.0
    return {'passed': first is None and total > 0,
            'max_abs_error': max_err if math.isfinite(max_err) else None,
            'within_tolerance_pct': 100.0 * within / total if total else 0.0,
            'messages': len(errors), 'first_failure': first}


def _settings(recording, prompt, max_age, max_skew) -> dict:
    """The node's configuration from its session (what the user gives wins), else defaults."""
    session = recording.session or {}
    return {'prompt': prompt or session.get('prompt') or DEFAULT_PROMPT,
            'max_age': max_age or session.get('max_obs_age_s') or 0.5,
            'max_skew': max_skew or session.get('max_skew_s') or 0.25,
            'on_fault': session.get('on_fault', 'hold'),
            'overrides': session.get('overrides') or {},
            'rate_hz': session.get('rate_hz'),
            'joint_names': session.get('joint_names')}


def _load(artifact: str, recording, settings: dict, schedule: bool):
    from lamp_ros.runtime import Runtime
    holder = {}

    def worker(infer):
        holder['schedule'] = RecordedSchedule(infer, {
            t.time: t.started for t in recording.ticks if t.started})
        return holder['schedule']
    runtime = Runtime.load(artifact, execution='async' if schedule else 'sync',
                           overrides=settings['overrides'], rate_hz=settings['rate_hz'],
                           worker_factory=worker if schedule else None)
    return runtime, holder.get('schedule')


def replay(bag: str, artifact: str, prompt: str | None = None, atol: float = 1e-5,
           rtol: float = 1e-4, max_age: float | None = None, max_skew: float | None = None,
           golden: str | None = None) -> dict:
    """Deterministic replay of `bag` through `artifact`; see the module docstring."""
    recording = read_recording(bag)
    settings = _settings(recording, prompt, max_age, max_skew)
    asynchronous = recording.asynchronous and \
        (recording.session or {}).get('execution', 'async') == 'async'
    runtime, schedule = _load(artifact, recording, settings, asynchronous)
    try:
        recording.layout = bag_layout(recording.messages, runtime.camera_slots,
                                      recording.session)
        if golden:
            with open(golden, encoding='utf-8') as f:
                expected = json.load(f)['commands']
        elif recording.layout['command'] is None and not recording.stamped:
            raise BagError(f'{bag}: no recorded commands on {list(topics.COMMAND_TOPICS)} and '
                           'no golden file to compare with')
        if not any(t.published is not None for t in recording.ticks):
            raise BagError(f'{bag}: no command messages to replay against')
        report = rerun(recording, runtime, schedule, settings)
    finally:
        runtime.close()
    produced = report.pop('produced')
    recorded, times, judged = report.pop('recorded'), report.pop('times'), report.pop('judged')
    wanted = expected if golden else [r if j else None for r, j in zip(recorded, judged)]
    result = compare_commands(produced, wanted, atol, rtol, times)
    exact = report['exact_commands']
    prefix = compare_commands(produced[:exact], wanted[:exact], atol, rtol, times)
    result.update(report, exact_commands=prefix['messages'], exact_passed=prefix['passed'],
                  mode='deterministic', atol=atol, rtol=rtol, bag=bag,
                  artifact_id=runtime.id, produced=produced)
    # the node's episode states are part of the verdict: a replay whose state left the
    # node's without a lost input to explain it has found a difference, commands or not
    result['passed'] = result['passed'] and not report['state_checks']['mismatched']
    return result


def localize(bag: str, artifact: str, against: str, prompt: str | None = None,
             atol: float = 1e-5, rtol: float = 1e-4, max_age: float | None = None,
             max_skew: float | None = None) -> dict:
    """Run two artifacts on the same bag (synchronously, on the recorded ticks and inputs);
    name the first node whose output differs."""
    from lamp_ros.artifact.compare import compare
    from lamp_ros.runtime import Runtime
    recording = read_recording(bag)
    settings = _settings(recording, prompt, max_age, max_skew)
    runtimes = [Runtime.load(a, execution='sync', overrides=settings['overrides'],
                             rate_hz=settings['rate_hz']) for a in (artifact, against)]
    layout = recording.layout = bag_layout(recording.messages, runtimes[0].camera_slots,
                                           recording.session)
    ticks = [t for t in recording.ticks if t.published is not None]
    if not ticks:
        raise BagError(f'{bag}: no command messages to replay against')
    engines = [ControlEngine(rt, list(layout['cameras']),
                             settings['joint_names'] or rt.joint_names, settings['prompt'],
                             settings['max_age'], settings['max_skew']) for rt in runtimes]
    first_episode = (ticks[0].row or {}).get('episode_start_s')
    for engine in engines:
        engine.start(first_episode if first_episode is not None
                     else ticks[0].time - 1.0 / runtimes[0].rate_hz)
    index = stamp_index(recording) if recording.stamped else None
    receive = iter(recording.messages)
    order = [(n.id, v) for n in runtimes[0].artifact.graph.nodes for v in n.outputs]
    compared = 0
    for number, tick in enumerate(ticks):
        if index is None:
            for message in receive:
                if message is tick.command:
                    break
                feed_received(engines, message, layout, message.t_ns * 1e-9)
        captures = []
        for rt, engine in zip(runtimes, engines):
            if index is not None:
                feed_stamped(engine, index, tick.stamps, layout, tick.time)
            rt.capture_into = {}
            engine.tick(tick.time)
            captures.append(rt.capture_into)
            rt.capture_into = None
        for node_id, value in order:
            a, b = captures[0].get(value), captures[1].get(value)
            if a is None or b is None:
                continue
            compared += 1
            result = compare(a, b, atol, rtol)
            if not result['passed']:
                return {'diverged': True, 'node': node_id, 'value': value, 'tick': number,
                        't': tick.time - ticks[0].time, **result,
                        'artifact': runtimes[0].id, 'against': runtimes[1].id,
                        'values_compared': compared}
    return {'diverged': False, 'node': None, 'values_compared': compared, 'ticks': len(ticks),
            'artifact': runtimes[0].id, 'against': runtimes[1].id}
