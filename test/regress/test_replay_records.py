"""Replay of bags that hold the node's own records (session, latency and inference rows,
episode states): made offline by the generator exactly as vla_node writes them (node/records.py),
with asynchronous inference of a known speed, then cut, thinned and tampered with as a real
recording can be. The ROS test of the same over DDS is test/regress/test_record_live.py."""

import json

import numpy as np
import pytest

from lamp_ros.cli import main
from lamp_ros.regress import topics
from lamp_ros.regress.bag import BagWriter, read_bag, TYPESTORE
from lamp_ros.regress.generate import EPOCH_NS, generate_bag
from lamp_ros.regress.recording import read_recording
from lamp_ros.regress.replay import replay
from lamp_ros.runtime import episode_state, Runtime
from lamp_ros.runtime.loop import run_ticks, synthetic_observation
from conftest import DEMO_SPEC


@pytest.fixture(scope='module')
def async_bag(demo_artifact, tmp_path_factory):
    """4 s of the demo policy whose every inference takes 3 control periods."""
    out = str(tmp_path_factory.mktemp('records') / 'async')
    generate_bag(demo_artifact, out, seconds=4.0, records_too=True, inference_ticks=3)
    return out


def _copy(bag: str, out: str, keep) -> str:
    writer = BagWriter(out)
    for m in read_bag(bag):
        if keep(m):
            writer.write(m.topic, m.msgtype, m.t_ns, m.raw)
    writer.close()
    return out


def test_an_asynchronous_run_replays_exactly_on_its_schedule(demo_artifact, async_bag):
    recording = read_recording(async_bag)
    assert recording.stamped and recording.asynchronous and recording.session
    merged = [t for t in recording.ticks if t.merged]
    # the chunk of every inference arrived three ticks after the one that started it
    assert merged and all(round((t.time - t.merged['submitted_tick_s']) * 22) == 3
                          for t in merged)
    report = replay(async_bag, demo_artifact)
    assert report['passed'] and report['max_abs_error'] == 0.0, report['first_failure']
    assert report['execution'] == 'async, on the recorded schedule'
    assert report['start']['kind'] == 'episode start' and not report['starts_mid_episode']
    assert not any(report['schedule'].values())
    checks = report['state_checks']
    assert checks['compared'] == len(merged) and checks['equal'] == checks['compared']


def test_the_same_bag_replayed_synchronously_would_not_match(demo_artifact, async_bag,
                                                             tmp_path):
    """Without the inference rows the replay cannot know when the chunks arrived: the
    schedule is what makes the asynchronous run exact (a check that it does something)."""
    bare = _copy(async_bag, str(tmp_path / 'bare'),
                 lambda m: m.topic not in (topics.INFERENCE_TOPIC, topics.EPISODE_STATE_TOPIC))
    report = replay(bare, demo_artifact)
    assert report['execution'] == 'sync' and not report['passed']


def test_a_recording_that_starts_mid_episode_continues_from_the_nodes_state(
        demo_artifact, async_bag, tmp_path, capsys):
    cut = EPOCH_NS + 1_500_000_000  # the session is latched: a late recorder has it too
    mid = _copy(async_bag, str(tmp_path / 'mid'),
                lambda m: m.t_ns >= cut or m.topic == topics.SESSION_TOPIC)
    report = replay(mid, demo_artifact)
    assert report['starts_mid_episode'] and report['start']['kind'] == 'episode state'
    assert report['passed'] and report['max_abs_error'] == 0.0
    assert report['commands_before_start'] > 0 and report['messages'] > 20
    assert main(['replay', mid, '--artifact', demo_artifact]) == 0
    out = capsys.readouterr().out
    assert out.startswith('PASSED') and 'the bag starts mid-episode' in out
    assert f'the {report["commands_before_start"]} commands before it are not compared' in out


def test_a_lost_frame_costs_one_chunk_not_the_recording(demo_artifact, async_bag, tmp_path):
    """The recorder loses a frame an inference read: the replay substitutes it, finds its
    state off the node's at the next merged chunk, takes the node's over and judges the rest."""
    recording = read_recording(async_bag)
    victim = [t for t in recording.ticks if t.started][2]
    stamp = victim.stamps['base']
    sec, nanosec = int(stamp), round((stamp - int(stamp)) * 1e9)

    def keep(m):
        if m.topic != '/camera/base/image_raw/compressed':
            return True
        header = m.decode().header.stamp
        return abs((header.sec - sec) * 10**9 + header.nanosec - nanosec) > 1000
    thinned = _copy(async_bag, str(tmp_path / 'thinned'), keep)
    report = replay(thinned, demo_artifact)
    assert report['inputs_substituted'] >= 1 and report['commands_from_lost_inputs'] > 0
    assert report['state_checks']['resynced_after_lost_inputs'] == 1
    assert report['state_checks']['mismatched'] == 0
    assert report['passed'], report['first_failure']
    json.dumps(report)  # plain JSON, numbers included


def test_a_state_the_replay_does_not_reach_fails_it(demo_artifact, async_bag, tmp_path):
    """The node's published state disagrees with the replay's while no input was lost: the
    replay fails, even though its commands up to that tick agree."""
    states = [m for m in read_bag(async_bag) if m.topic == topics.EPISODE_STATE_TOPIC]
    target = states[2]
    arrays, meta = episode_state.from_bytes(target.decode().data)
    arrays['state/sample_noise/counter'] = arrays['state/sample_noise/counter'] + 1
    blob = episode_state.to_bytes(arrays, meta)
    writer = BagWriter(str(tmp_path / 'tampered'))
    for m in read_bag(async_bag):
        raw = m.raw
        if (m.topic, m.t_ns) == (target.topic, target.t_ns):
            msg = m.decode()
            msg.data = np.frombuffer(blob, np.uint8)
            raw = TYPESTORE.serialize_cdr(msg, m.msgtype)
        writer.write(m.topic, m.msgtype, m.t_ns, raw)
    writer.close()
    report = replay(str(tmp_path / 'tampered'), demo_artifact)
    assert not report['passed']
    # (the replay takes the node's state over, so the next state differs by the same count)
    assert report['state_checks']['mismatched'] >= 1
    assert report['state_checks']['first_mismatch']['arrays'] == ['state/sample_noise/counter']


def test_another_artifact_is_compared_not_resynced(tiny_variant, async_bag):
    """A regression through a changed artifact runs free from the episode start: the node's
    states are not forced on it, and its commands differ."""
    area = tiny_variant('area', DEMO_SPEC)
    report = replay(async_bag, area)
    assert not report['passed'] and report['state_checks']['compared'] == 0
    assert report['recorded_artifact_id'] != report['artifact_id']


def test_episode_state_round_trip_and_refusal(demo_artifact, act_small_artifact):
    runtime = Runtime.load(demo_artifact)
    obs = synthetic_observation(runtime)
    run_ticks(runtime, 30, realtime=False, observation=obs)
    arrays, meta = episode_state.from_bytes(episode_state.to_bytes(
        episode_state.capture(runtime), {'tick_s': 1.5}))
    assert meta == {'tick_s': '1.5'}
    other = Runtime.load(demo_artifact)
    episode_state.restore(other, arrays)
    for k in range(30, 60):
        assert np.array_equal(runtime.step(obs, k / 22), other.step(obs, k / 22))
    with pytest.raises(ValueError, match='episode state: arrays missing'):
        episode_state.restore(Runtime.load(act_small_artifact), arrays)
    with pytest.raises(ValueError, match='not a safetensors blob'):
        episode_state.from_bytes(b'\x10\x00\x00\x00\x00\x00\x00\x00{broken')
