"""Linters run as tests (ament style): flake8 with the ament_flake8 line length of 99."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGETS = ['lamp_ros', 'test', 'scripts', 'launch', 'bench', 'setup.py']


def test_flake8():
    targets = [t for t in TARGETS if os.path.exists(os.path.join(ROOT, t))]
    result = subprocess.run(
        [sys.executable, '-m', 'flake8', '--max-line-length', '99', *targets],
        cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, 'flake8 found problems:\n' + result.stdout + result.stderr
