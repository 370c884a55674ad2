"""Runtime.load refuses corrupt, tampered, mismatched or misplaced artifacts, naming the cause."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from lamp_ros.artifact import manifest as manifest_module
from lamp_ros.artifact.manifest import ArtifactError, write_manifest
from lamp_ros.graph.graph import Graph
from lamp_ros.runtime import Runtime


@pytest.fixture
def copy(tiny_artifact, tmp_path):
    dst = tmp_path / 'a'
    shutil.copytree(tiny_artifact, dst)
    return str(dst)


def _rewrite_manifest(root, **changes):
    """Re-sign the manifest after an edit (as a careless tool would), so checksums pass."""
    with open(os.path.join(root, 'manifest.json')) as f:
        m = json.load(f)
    m.update(changes)
    write_manifest(root, m['target'], m['abi'], m['created_by'], m['name'])


def _flip_byte(path, offset):
    """Corrupt one byte of a file in place (offset may count from the end)."""
    data = bytearray(open(path, 'rb').read())
    data[offset] ^= 0xFF
    open(path, 'wb').write(bytes(data))


def test_loads_and_steps(tiny_artifact):
    runtime = Runtime.load(tiny_artifact)
    assert runtime.device == 'cpu' and runtime.joint_names[-1] == 'gripper'


def test_tampered_weight_file(copy):
    _flip_byte(os.path.join(copy, 'weights', 'vision.safetensors'), -10)
    with pytest.raises(ArtifactError, match=r'weights/vision.safetensors: sha256 mismatch'):
        Runtime.load(copy)


def test_truncated_model_file(copy):
    plan = json.load(open(os.path.join(copy, 'plan.json')))
    onnx_rel = [g for g in plan['groups'] if g['backend'] == 'onnxruntime'][0]['build']['onnx']
    path = os.path.join(copy, onnx_rel)
    os.truncate(path, os.path.getsize(path) // 2)
    with pytest.raises(ArtifactError, match=f'{onnx_rel}: size .*truncated'):
        Runtime.load(copy)


def test_truncated_tensorrt_engine(copy):
    # Turn the model group into a TensorRT group whose engine file is cut short, and re-sign
    # the manifest so only the engine check can catch it (TensorRT is not installed here).
    plan_path = os.path.join(copy, 'plan.json')
    plan = json.load(open(plan_path))
    group = [g for g in plan['groups'] if g['backend'] == 'onnxruntime'][0]
    engine = f'groups/{group["name"]}/model.engine'
    with open(os.path.join(copy, engine), 'wb') as f:
        f.write(b'\0' * 1000)
    group.update(backend='tensorrt', device='cuda:0',
                 build={'engine': engine, 'engine_bytes': 4000, 'io': {}})
    json.dump(plan, open(plan_path, 'w'))
    _rewrite_manifest(copy)
    with pytest.raises(ValueError, match=r'model.engine.*truncated'):
        Runtime.load(copy)


def test_other_schema_version(copy):
    path = os.path.join(copy, 'manifest.json')
    m = json.load(open(path))
    m['schema_version'] = 3
    json.dump(m, open(path, 'w'))
    with pytest.raises(ArtifactError, match=r'schema_version 3 is not supported \(this runtime '
                                            r'reads 1, 2\)'):
        Runtime.load(copy)


def test_large_files_are_checked_piece_by_piece(copy, monkeypatch):
    """A file over PIECE_BYTES has a sha256 per piece (checked on all cores); a changed byte is
    refused with the piece it is in."""
    monkeypatch.setattr(manifest_module, 'PIECE_BYTES', 4096)
    _rewrite_manifest(copy)
    m = json.load(open(os.path.join(copy, 'manifest.json')))
    rel = 'weights/vision.safetensors'
    entry = m['files'][rel]
    assert m['schema_version'] == 2 and 'sha256' not in entry and entry['piece_bytes'] == 4096
    assert len(entry['sha256_pieces']) == -(-entry['size'] // 4096) > 2
    small = [e for e in m['files'].values() if e['size'] <= 4096]
    assert small and all('sha256' in e for e in small)
    Runtime.load(copy).close()
    _flip_byte(os.path.join(copy, rel), 4096 + 17)
    with pytest.raises(ArtifactError, match=f'{rel}: sha256 mismatch in bytes 4096-8192'):
        Runtime.load(copy)


def test_schema_1_manifests_still_load(copy, monkeypatch):
    """An artifact from before the pieces (one sha256 per file, schema 1) is still read, and
    its checksums still bite."""
    path = os.path.join(copy, 'manifest.json')
    m = json.load(open(path))
    for entry in m['files'].values():
        assert 'sha256' in entry  # the tiny artifact has no file over PIECE_BYTES
    m['schema_version'] = 1
    m['artifact_id'] = manifest_module.artifact_id(m)
    json.dump(m, open(path, 'w'))
    Runtime.load(copy).close()
    _flip_byte(os.path.join(copy, 'weights', 'vision.safetensors'), -10)
    with pytest.raises(ArtifactError, match=r'vision.safetensors: sha256 mismatch \(file'):
        Runtime.load(copy)


def test_content_digest_names_content_under_either_layout():
    whole = {'size': 10, 'sha256': 'ab' * 32}
    pieces = {'size': 10, 'piece_bytes': 4, 'sha256_pieces': ['a' * 64, 'b' * 64, 'c' * 64]}
    assert manifest_module.content_digest(whole) == 'ab' * 32
    assert manifest_module.content_digest(pieces) == manifest_module.content_digest(
        dict(pieces)) != manifest_module.content_digest({**pieces, 'piece_bytes': 5})


def test_edited_manifest(copy):
    path = os.path.join(copy, 'manifest.json')
    m = json.load(open(path))
    m['abi']['rate_hz'] = 50.0
    json.dump(m, open(path, 'w'))
    with pytest.raises(ArtifactError, match='artifact_id does not match'):
        Runtime.load(copy)


@pytest.mark.skipif(os.path.exists('/dev/nvidia0'), reason='this machine has a CUDA device')
def test_cuda_artifact_without_cuda(copy):
    _rewrite_manifest(copy, target='cuda')
    plan_path = os.path.join(copy, 'plan.json')
    plan = json.load(open(plan_path))
    plan['target'] = 'cuda'
    json.dump(plan, open(plan_path, 'w'))
    _rewrite_manifest(copy, target='cuda')
    message = "target 'cuda' .* needs a CUDA device; this machine has none"
    with pytest.raises(ArtifactError, match=message):
        Runtime.load(copy)


def test_not_an_artifact(tmp_path):
    with pytest.raises(ArtifactError, match='manifest.json: missing'):
        Runtime.load(str(tmp_path))


def test_loading_and_stepping_never_imports_torch(tiny_artifact):
    code = (
        'import sys\n'
        'from lamp_ros.runtime import Runtime\n'
        'from lamp_ros.runtime.loop import run_ticks\n'
        f'rt = Runtime.load({tiny_artifact!r})\n'
        'cmds = run_ticks(rt, 3, realtime=False)\n'
        'assert cmds[-1][1] is not None\n'
        'bad = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "tensorrt")\n'
        '             or m.startswith(("lamp_ros.compiler", "lamp_ros.trace")))\n'
        'print("IMPORTED", bad)\n')
    result = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert 'IMPORTED []' in result.stdout, result.stdout


def test_artifact_from_before_uint8_pixels(copy):
    # An artifact traced when the host mapped pixels to [-1, 1] has no `pixels` attr on its
    # camera stages; its model would get uint8 pixels unmapped, so it is refused at load.
    path = os.path.join(copy, 'graph.json')
    graph = json.load(open(path))
    old = [n for n in graph['nodes'] if n['op'] in ('preprocess_image', 'stack_cameras')]
    assert len(old) == 4
    for node in old:
        del node['attrs']['pixels']
        del node['hash']  # rehashed below, as the tracer of that time would have written it
    with open(path, 'w') as f:
        f.write(Graph.from_dict(graph).to_json())
    _rewrite_manifest(copy)
    with pytest.raises((ArtifactError, ValueError),
                       match=r'preprocess_image: this graph hands float \[-1, 1\] pixels.*'
                             r'rebuild'):
        Runtime.load(copy)
