"""Recording the live graph and replaying it; replaying a bag into a running node (real DDS on
localhost, vla_node in its own process, `lamp record` and `lamp replay` as users run them)."""

from collections import Counter
import json
import subprocess
import sys
import threading

import pytest

from lamp_ros.regress.bag import read_bag
from lamp_ros.regress.live import live_replay, LiveReplayError

pytestmark = pytest.mark.ros
CONFIGURE, ACTIVATE = 1, 3


def test_the_replay_waits_for_the_nodes_side_of_discovery():
    """unmatched_at_node reads the node's newest /diagnostics: None before any report with
    publisher counts, then the published topics the node still sees no publisher on."""
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue

    from lamp_ros.regress.live import unmatched_at_node

    def report(**counts):
        status = DiagnosticStatus(values=[KeyValue(key=f'publishers./{t}', value=str(n))
                                          for t, n in counts.items()])
        return DiagnosticArray(status=[status])
    published = {'/joint_states', '/cam', '/cam/compressed'}
    assert unmatched_at_node([], published) is None
    assert unmatched_at_node([DiagnosticArray(status=[DiagnosticStatus()])], published) is None
    seen = [report(joint_states=1, cam=0)]
    assert unmatched_at_node(seen, published) == ['/cam']
    seen.append(report(joint_states=1, cam=1))
    assert unmatched_at_node(seen, published) == []  # /cam/compressed: the node reads raw


class Recorder:
    """`lamp record` in its own process, as a user runs it; its printed lines kept."""

    def __init__(self, out: str, seconds: float):
        self.proc = subprocess.Popen([sys.executable, '-m', 'lamp_ros.cli', 'record', '--out',
                                      out, '--duration', str(seconds)], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stdout),
                                       daemon=True)
        self.reader.start()

    def has(self, prefix: str) -> bool:
        return any(line.startswith(prefix) for line in self.lines)

    def finish(self) -> str:
        assert self.proc.wait(timeout=120) == 0, ''.join(self.lines)
        self.reader.join(timeout=10)
        return ''.join(self.lines)


# what the recorder must hear before the episode it records may begin
STREAMS = ('/vla_policy/joint_trajectory', '/vla_policy/command_latency',
           '/vla_policy/inference', '/vla_policy/episode_state', '/vla_policy/session',
           '/joint_states', '/camera/base/image_raw', '/camera/left_wrist/image_raw',
           '/camera/right_wrist/image_raw')
SECONDS = 20.0


def _replay_passes(bag: str, artifact: str) -> dict:
    """`lamp replay BAG --artifact A` as written in the docs: exit 0, PASSED; and its JSON."""
    text = subprocess.run([sys.executable, '-m', 'lamp_ros.cli', 'replay', bag, '--artifact',
                           artifact], capture_output=True, text=True, timeout=600)
    assert text.returncode == 0, (text.stdout, text.stderr[-3000:])
    assert text.stdout.startswith('PASSED'), text.stdout
    data = subprocess.run([sys.executable, '-m', 'lamp_ros.cli', 'replay', bag, '--artifact',
                           artifact, '--json'], capture_output=True, text=True, timeout=600)
    assert data.returncode == 0, data.stderr[-3000:]
    report = json.loads(data.stdout)  # plain JSON, whatever the recording held
    assert report['passed'] and report['inputs'] == 'by recorded stamps'
    assert report['execution'] == 'async, on the recorded schedule'
    assert not any(v for k, v in report['schedule'].items()), report['schedule']
    checks = report['state_checks']
    assert checks['mismatched'] == 0 and checks['equal'] >= 5, checks
    return report


def test_a_recording_started_before_the_node_replays_from_the_episode_start(
        demo_artifact, make_harness, tmp_path):
    """Recorder first (the README's order reversed): the node is activated only once the
    recorder hears every stream, so the bag holds the episode from its first tick."""
    h = make_harness(demo_artifact)  # async, the default; the simulated arm of its robot
    assert h.transition(CONFIGURE)
    out = str(tmp_path / 'recorder_first')
    recorder = Recorder(out, SECONDS)
    assert h.wait_for(lambda: all(recorder.has(f'matched {t}') for t in STREAMS), 60), \
        recorder.lines
    assert h.transition(ACTIVATE)
    output = recorder.finish()
    assert recorder.has('session of /vla_policy: artifact'), output
    counts = Counter(m.topic for m in read_bag(out))
    assert counts['/vla_policy/joint_trajectory'] > 100, counts
    report = _replay_passes(out, demo_artifact)
    assert report['start']['kind'] == 'episode start' and not report['starts_mid_episode']
    assert report['commands_before_start'] == 0
    assert report['messages'] >= counts['/vla_policy/joint_trajectory'] - 1 - \
        report['commands_from_lost_inputs'], report


def test_a_recording_started_mid_episode_replays_from_the_nodes_state(
        demo_artifact, make_harness, tmp_path):
    """Node first (the README's order): the recorder joins a running episode, takes the
    node's session (latched) and its topics, and the replay continues from the first episode
    state the node published after the recorder joined."""
    h = make_harness(demo_artifact)
    assert h.transition(CONFIGURE) and h.transition(ACTIVATE)
    assert h.wait_for(lambda: len(h.commands) >= 30, 120), h.log()[-3000:]
    out = str(tmp_path / 'node_first')
    recorder = Recorder(out, SECONDS)
    output = recorder.finish()
    assert recorder.has('session of /vla_policy: artifact'), output
    report = _replay_passes(out, demo_artifact)
    assert report['starts_mid_episode'] and report['start']['kind'] == 'episode state'
    assert report['commands_before_start'] > 0 and report['messages'] > 100, report


def test_live_replay_into_a_running_node(demo_artifact, make_harness):
    """The committed bag played into a running async node: the node's commands are what the
    artifact computes from the inputs the node used (its own records say which)."""
    h = make_harness(demo_artifact, sim=False, image_transport='compressed')
    assert h.transition(CONFIGURE) and h.transition(ACTIVATE)
    try:
        report = live_replay('test/data/pi05_tiny_sim', demo_artifact, rate=1.0)
    except LiveReplayError as exc:  # what the node said about the inputs it got, if any
        pytest.fail(f'{exc}\n--- the node\'s log ---\n{h.log()[-4000:]}')
    assert report['mode'] == 'live' and 0 <= report['discovery_s'] < 20
    assert report['commands_received'] > 0
    assert report['passed'], (report['first_failure'], report['state_checks'],
                              h.log()[-3000:])
    assert report['messages'] > 0 and report['execution'] == 'async, on the recorded schedule'
    assert report['recorded_commands_matched'] > 0


def test_live_replay_without_a_node_fails_with_the_reason(demo_artifact):
    """Nobody subscribes: `lamp replay --live` names the topics and exits 1, cleanly (a spin
    thread left running used to abort the process at exit: `terminate called ...`)."""
    result = subprocess.run([sys.executable, '-m', 'lamp_ros.cli', 'replay',
                             'test/data/pi05_tiny_sim', '--live', '--artifact', demo_artifact,
                             '--discovery-timeout', '2'],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert 'terminate called' not in result.stderr
    assert 'no subscriber on /camera/base/image_raw/compressed' in result.stderr
    assert 'no publisher on /vla_policy/joint_trajectory after 2 s: is vla_node active and ' \
        'are ROS_DOMAIN_ID / ROS_AUTOMATIC_DISCOVERY_RANGE the same?' in result.stderr
