"""An artifact's spec (spec.json) keeps the paths its spec file named (checkpoint, tokenizer)
relative to that file's folder; they resolve against the artifact's folder wherever a command
runs, never against the working directory. The demo policy's spec names both by relative
paths (config/specs/pi05_tiny.yaml: `../../lamp_ros/...`), so its artifact, placed as the
docs build it (artifacts/<name>, two folders below a repository), is the real case."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from lamp_ros.spec import load_artifact_spec

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ASSETS = os.path.join(ROOT, 'lamp_ros', 'policies', 'pi05', 'assets', 'sim7_reach')


@pytest.fixture
def placed(demo_artifact, tmp_path):
    """The demo artifact at <repository>/artifacts/pi05_tiny of a repository whose lamp_ros is
    this one (a link), as `lamp compile config/specs/pi05_tiny.yaml --out
    artifacts/pi05_tiny` leaves it."""
    repo = tmp_path / 'repo'
    (repo / 'artifacts').mkdir(parents=True)
    (repo / 'lamp_ros').symlink_to(os.path.join(ROOT, 'lamp_ros'))
    shutil.copytree(demo_artifact, repo / 'artifacts' / 'pi05_tiny')
    return str(repo / 'artifacts' / 'pi05_tiny')


def test_the_paths_resolve_against_the_artifact(placed, tmp_path, monkeypatch):
    elsewhere = tmp_path / 'elsewhere'
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    spec = load_artifact_spec(os.path.relpath(placed))
    tokenizer = spec.resolve(spec.policy['options']['tokenizer']['path'])
    assert os.path.samefile(tokenizer, os.path.join(ASSETS, 'tokenizer.model'))
    assert os.path.samefile(spec.resolve(spec.weights['path']), ASSETS)


def test_a_folder_without_a_spec_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match='no spec.json'):
        load_artifact_spec(str(tmp_path))


def test_lamp_bench_runs_from_any_folder(placed, tmp_path):
    """The issue's case: `lamp bench` read the tokenizer path against the working directory."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [ROOT] + [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p]))
    result = subprocess.run([sys.executable, '-m', 'lamp_ros.cli', 'bench', placed,
                             '--runs', '2', '--json'], capture_output=True, text=True,
                            timeout=600, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout)['speedup'] > 0
    assert 'build the eager reference from its spec (pi05_tiny)' in result.stderr
    assert 'run 2/2' in result.stderr  # progress, off a terminal
