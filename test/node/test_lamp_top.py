"""`lamp top` drives and shows a vla_node without any ros2 CLI: the node starts unconfigured
(no autostart, as the README's "Your checkpoint" runs it), the real `lamp` command in a
subprocess configures and activates it, holds and resumes it, prints its status once, refuses
what the lifecycle does not allow and says when no node answers."""

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.ros

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def top(*args, timeout: float = 180):
    return subprocess.run([sys.executable, '-m', 'lamp_ros.cli', 'top', *args],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=dict(os.environ, COLUMNS='120'))


def value(h, key):
    status = h.last_status()
    return {kv.key: kv.value for kv in status.values}.get(key) if status else None


def test_lamp_top_configures_activates_holds_resumes_and_shows(act_small_artifact,
                                                               make_harness):
    h = make_harness(act_small_artifact, sim_params={'cameras': ['front', 'side']})
    try:
        assert h.wait_for(lambda: 'waiting for a configure transition' in h.log(), 30), h.log()
        result = top('--state')
        assert result.returncode == 0 and result.stdout.strip() == 'state: unconfigured', \
            result.stdout + result.stderr
        result = top('--configure', '--activate')
        assert result.returncode == 0, result.stdout + result.stderr + h.log()
        assert result.stdout.splitlines() == ['configure: ok, the node is inactive',
                                              'activate: ok, the node is active']
        assert h.state() == 'active'
        assert h.wait_for(lambda: len(h.commands) > 10, 60), h.log()

        result = top('--hold')
        assert result.returncode == 0 and result.stdout.startswith('hold: held: position'), \
            result.stdout + result.stderr
        assert h.wait_for(lambda: value(h, 'held') == 'true', 30), h.log()
        assert top('--hold').stdout.startswith('hold: already held')  # asked twice: still ok
        result = top('--resume')
        assert result.returncode == 0 and 'resumed: new episode' in result.stdout, \
            result.stdout + result.stderr
        assert h.wait_for(lambda: value(h, 'held') == 'false', 30), h.log()

        result = top('--once')
        assert result.returncode == 0, result.stdout + result.stderr
        for shown in ('/vla_policy', 'lifecycle: active', 'achieved_rate_hz',
                      'inference_p50_ms', 'commands_published', '/vla_policy/profile'):
            assert shown in result.stdout, result.stdout

        result = top('--cleanup')  # not from active: refused, with the node's reason
        assert result.returncode == 1, result.stdout + result.stderr
        assert 'cleanup: failed, the node is active (cleanup starts from inactive)' in \
            result.stdout
        assert 'Unable to start transition 2' in result.stdout, result.stdout
        assert h.state() == 'active'

        result = top('--deactivate', '--cleanup', '--state')
        assert result.returncode == 0, result.stdout + result.stderr
        assert result.stdout.splitlines()[-1] == 'state: unconfigured'
        result = top('--hold')  # not active: the node's refusal
        assert result.returncode == 1 and 'not active' in result.stdout, result.stdout
    finally:
        log = h.stop()
    assert 'Traceback' not in log, log


def test_lamp_top_says_when_no_node_answers():
    result = top('--node', '/no_such_node', '--timeout', '2', '--state', timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert 'lamp top: /no_such_node: no lifecycle services within 2 s' in result.stderr
