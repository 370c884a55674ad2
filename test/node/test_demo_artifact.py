"""`lamp demo`'s artifact (lamp_ros/demo.py ensure_artifact): compiled where it is missing, does
not load, or was built from another version of the spec; kept otherwise. Its compile is `lamp
compile` of the demo's spec, the suite's world_demo_artifact: here that build is copied in its
place (test_demo.py runs the demo itself, over ROS)."""

import io
import json
import os
import shutil

from rich.console import Console

from lamp_ros import demo
from lamp_ros.compiler import build


def _ensure(out: str, monkeypatch, world_demo_artifact, spec: str = demo.SPEC) -> tuple:
    """(what ensure_artifact printed, the specs it compiled)."""
    compiled = []

    def compile_spec(spec, out, progress=None):
        compiled.append(spec)
        progress('tracing')  # the progress lines it shows
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(world_demo_artifact, out)
        with open(os.path.join(out, 'manifest.json'), encoding='utf-8') as f:
            artifact_id = json.load(f)['artifact_id']
        return build.BuildResult(out, artifact_id, True, {}, {})

    monkeypatch.setattr(build, 'compile_spec', compile_spec)
    console = Console(file=io.StringIO(), width=200)
    assert demo.ensure_artifact(console, spec, out) == out
    return console.file.getvalue(), compiled


def test_the_demo_builds_its_artifact_when_missing_broken_or_stale(
        world_demo_artifact, tmp_path, monkeypatch):
    out = str(tmp_path / 'artifacts' / 'viperx_pick_place_demo')
    text, compiled = _ensure(out, monkeypatch, world_demo_artifact)
    assert compiled == [demo.SPEC] and 'artifact: building' in text
    assert 'built in' in text and 'parity passed' in text
    text, compiled = _ensure(out, monkeypatch, world_demo_artifact)  # present and current: kept
    assert compiled == [] and 'present, verified, loads' in text
    weights = os.path.join(out, 'weights', sorted(os.listdir(os.path.join(out, 'weights')))[0])
    with open(weights, 'r+b') as f:  # a flipped byte: it no longer verifies
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 0xFF]))
    text, compiled = _ensure(out, monkeypatch, world_demo_artifact)
    assert compiled == [demo.SPEC] and 'artifact: building' in text
    spec = str(tmp_path / 'viperx_pick_place_demo.yaml')  # another version: rebuilt, saying why
    from lamp_ros.spec import spec_data, write_spec
    data = spec_data(demo.SPEC)
    data['passes']['fuse_attention'] = False
    write_spec(data, spec)
    text, compiled = _ensure(out, monkeypatch, world_demo_artifact, spec)
    assert compiled == [spec] and 'artifact: rebuilding' in text and 'passes' in text
