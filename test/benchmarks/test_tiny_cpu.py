"""bench/tiny_cpu.py refuses builds it cannot compare. Its run itself, building its four
variants as bench/README.md says, is test/docs/test_bench_readme.py."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, 'bench', 'tiny_cpu.py')


def test_unknown_or_incomplete_builds_are_refused(tmp_path):
    env = {**os.environ, 'PYTHONPATH': ROOT}
    done = subprocess.run([sys.executable, SCRIPT, '--artifact', 'no_passes=x'], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and 'pi05_tiny included' in done.stderr
