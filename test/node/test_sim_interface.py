"""`lamp sim --ros-args -p artifact:=...`, exactly as the docs write it, for an artifact whose
spec names no robot (act_small): the simulator publishes the artifact's own cameras (front,
side) at its frame size and its joints, vla_node drives it over DDS, and both say so in their
status lines. What cannot be simulated is refused with the reason and a non-zero exit."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest

pytestmark = pytest.mark.ros

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIGURE, ACTIVATE = 1, 3


def lamp(*args):
    return [sys.executable, '-m', 'lamp_ros.cli', *args]


def test_lamp_sim_simulates_the_artifacts_interface(act_small_artifact, make_harness):
    with tempfile.NamedTemporaryFile('w+', suffix='.log') as log:
        sim = subprocess.Popen(lamp('sim', '--ros-args', '-p', f'artifact:={act_small_artifact}'),
                               stdout=log, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                               env=dict(os.environ, PYTHONUNBUFFERED='1'))

        def sim_log():
            with open(log.name, encoding='utf-8', errors='replace') as f:
                return f.read()

        def commands_received():
            return [int(n) for n in re.findall(r'commands received (\d+)', sim_log())]

        h = make_harness(act_small_artifact, sim=False)
        try:
            assert h.transition(CONFIGURE) and h.transition(ACTIVATE), h.log()
            assert h.wait_for(lambda: len(h.commands) > 10, 60), h.log() + sim_log()
            # the node hears the artifact's two cameras at the interface's 640x480
            assert h.wait_for(lambda: any(
                {kv.key: kv.value for kv in m.status[0].values}.get(
                    f'image_size.{slot}') == '640x480' for _, m in h.diagnostics[-3:]
                for slot in ('front', 'side')), 60), h.log()
            # its status line (every 5 s) counts the commands it follows
            assert h.wait_for(lambda: any(n > 0 for n in commands_received()), 60), sim_log()
            assert h.wait_for(lambda: 'commands sent' in h.log(), 30), h.log()
        finally:
            node_log = h.stop()
            sim.send_signal(signal.SIGINT)
            try:
                sim.wait(timeout=20)
            except subprocess.TimeoutExpired:
                sim.kill()
                sim.wait()
        out = sim_log()
    assert 'simulating act_small (interface), its interface' in out, out
    assert 'front 640x480 rgb8 on /camera/front/image_raw' in out, out
    assert re.search(r'frames front \d+, side \d+', out), out
    assert 'Traceback' not in out + node_log, out + node_log
    # the node's own status line: level, rate, inference, commands, faults
    assert re.search(r'(OK|WARN|STALE): [\d.]+/22\.0 Hz; .*commands sent.*; faults: ',
                     node_log), node_log


def test_what_cannot_be_simulated_is_refused(act_small_artifact, tmp_path):
    """`lamp sim -- --ros-args ...` (the form that worked before) reads the same way."""
    root = tmp_path / 'act_small'
    shutil.copytree(act_small_artifact, root)
    manifest = json.loads((root / 'manifest.json').read_text())
    manifest['abi']['camera_slots'] = ['front cam', 'side']
    (root / 'manifest.json').write_text(json.dumps(manifest))
    result = subprocess.run(lamp('sim', '--', '--ros-args', '-p', f'artifact:={root}'),
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "lamp sim: error: artifact" in result.stderr
    assert "camera slot 'front cam' gives no valid topic name" in result.stderr
    assert 'Traceback' not in result.stderr
