"""The README's main job runs end to end: artifact (built if missing), node, simulated arm."""

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.ros


def test_demo_runs_and_reports(tmp_path):
    result = subprocess.run([sys.executable, '-m', 'lamp_ros.cli', 'demo', '--seconds', '3'],
                            capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, COLUMNS='120'))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    out = result.stdout
    assert 'commands:' in out and 'the arm followed' in out
    assert 'diagnostics' in out and 'last commands' in out
