"""The package's shape: the core's packages import downward only (lazy imports included), and no
core package imports a policy package. The contracts are setup.cfg's [importlinter] sections,
checked by import-linter's `lint-imports`."""

import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINT_IMPORTS = os.path.join(os.path.dirname(sys.executable), 'lint-imports')


def _lint(root: str) -> subprocess.CompletedProcess:
    """`lint-imports` over the lamp_ros package found in `root`, with the repo's contracts."""
    return subprocess.run([LINT_IMPORTS, '--config', os.path.join(ROOT, 'setup.cfg'),
                           '--no-cache'], cwd=root, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=root))


def test_the_layers_and_the_model_free_core_hold():
    result = _lint(ROOT)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert 'Contracts: 2 kept, 0 broken.' in result.stdout


def test_an_upward_or_a_model_import_breaks_the_contracts(tmp_path):
    """The check can fail: a copy of the package with a lazy upward import (graph -> runtime)
    and a core module importing pi0.5 is refused, each named."""
    shutil.copytree(os.path.join(ROOT, 'lamp_ros'), tmp_path / 'lamp_ros',
                    ignore=shutil.ignore_patterns('__pycache__', 'assets', 'tiles'))
    with open(tmp_path / 'lamp_ros' / 'graph' / 'summary.py', 'a', encoding='utf-8') as f:
        f.write('\n\ndef _upward():\n    from lamp_ros.runtime import Runtime\n'
                '    return Runtime\n')
    with open(tmp_path / 'lamp_ros' / 'compiler' / 'build.py', 'a', encoding='utf-8') as f:
        f.write('\n\ndef _model():\n    from lamp_ros.policies.pi05 import config\n'
                '    return config\n')
    result = _lint(str(tmp_path))
    assert result.returncode != 0
    assert 'Contracts: 0 kept, 2 broken.' in result.stdout, result.stdout[-4000:]
    assert 'lamp_ros.graph is not allowed to import lamp_ros.runtime' in result.stdout
    assert 'lamp_ros.compiler is not allowed to import lamp_ros.policies' in result.stdout
