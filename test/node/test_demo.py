"""The README's main job runs end to end: artifact (built if missing), node, the MuJoCo world."""

import os
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.ros


def test_demo_runs_and_reports(world_demo_artifact, tmp_path):
    """`lamp demo` as the README runs it (a 3 s episode). Its artifact,
    artifacts/viperx_pick_place_demo, is the suite's build of the demo's spec where it is
    missing or of another spec version (the same spec compiled the same way: the same
    artifact), so that this serial phase compiles nothing; the demo's own build of it is
    test_demo_artifact.py's."""
    from lamp_ros.demo import ARTIFACT, SPEC, spec_changes
    try:
        current = spec_changes(ARTIFACT, SPEC) == []
    except (OSError, ValueError):  # none there yet, or no readable spec.json
        current = False
    if not current:
        shutil.rmtree(ARTIFACT, ignore_errors=True)
        shutil.copytree(world_demo_artifact, ARTIFACT)
    result = subprocess.run([sys.executable, '-m', 'lamp_ros.cli', 'demo', '--seconds', '3'],
                            capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, COLUMNS='120'))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    out = result.stdout
    assert 'commands:' in out and 'the arm followed' in out
    assert 'diagnostics' in out and 'last commands' in out
    assert 'task (put the red cube in the bin): ' in out and 'base camera' in out
    assert 'success' in out or 'failure' in out     # the physics' verdict, either way
    assert 'command steps:' in out and 'of ticks within half the max step' in out


def test_an_artifact_of_another_spec_version_is_named(world_demo_artifact, tmp_path):
    """The demo rebuilds artifacts/viperx_pick_place_demo when its spec
    (config/specs/viperx_pick_place_demo.yaml) has changed since: the keys that differ from the
    artifact's spec.json say why."""
    import yaml

    from lamp_ros.demo import ROOT, spec_changes, SPEC
    assert spec_changes(world_demo_artifact, SPEC) == []
    with open(SPEC, encoding='utf-8') as f:
        spec = yaml.safe_load(f)
    spec['passes']['fuse_attention'] = False
    spec['fusion']['text_lengths'] = [48]
    # the copy sees the files the spec names at the same relative places
    (tmp_path / 'config' / 'specs').mkdir(parents=True)
    (tmp_path / 'config' / 'robots').symlink_to(os.path.join(ROOT, 'config', 'robots'))
    (tmp_path / 'lamp_ros').symlink_to(os.path.join(ROOT, 'lamp_ros'))
    edited = tmp_path / 'config' / 'specs' / 'viperx_pick_place_demo.yaml'
    edited.write_text(yaml.safe_dump(spec))
    assert spec_changes(world_demo_artifact, str(edited)) == ['fusion', 'passes']
