"""`lamp verify`: checksums, schemas and a torch-free parity re-run on the stored evidence."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from lamp_ros.artifact.manifest import write_manifest
from lamp_ros.cli import main


@pytest.fixture
def copy(tiny_artifact, tmp_path):
    dst = tmp_path / 'a'
    shutil.copytree(tiny_artifact, dst)
    return str(dst)


def _resign(root):
    with open(os.path.join(root, 'manifest.json')) as f:
        m = json.load(f)
    write_manifest(root, m['target'], m['abi'], m['created_by'], m['name'])


def test_fresh_artifact_verifies(tiny_artifact, capsys):
    assert main(['verify', tiny_artifact]) == 0
    out = capsys.readouterr().out
    assert 'verified' in out and 'FAIL' not in out


def test_flipped_weight_byte_fails_naming_the_file(copy, capsys):
    path = os.path.join(copy, 'weights', 'vision.safetensors')
    data = bytearray(open(path, 'rb').read())
    data[-10] ^= 0xFF
    open(path, 'wb').write(bytes(data))
    assert main(['verify', copy]) != 0
    assert 'weights/vision.safetensors: sha256 mismatch' in capsys.readouterr().out


def test_wrong_expected_outputs_fail_naming_the_output(copy, capsys):
    # A consistent edit (manifest re-signed): only the parity re-run can catch it.
    path = os.path.join(copy, 'evidence', 'parity_expected.safetensors')
    expected = load_file(path)
    expected['2/clamp.command'] = expected['2/clamp.command'] + np.float64(0.01)
    save_file(expected, path)
    _resign(copy)
    assert main(['verify', copy, '--json']) == 1
    report = json.loads(capsys.readouterr().out)
    failed = [c for c in report['checks'] if not c['passed']]
    assert [c['name'] for c in failed] == ['parity']
    assert 'output clamp.command: sample 2' in failed[0]['message']


def test_whitebox_commands_never_import_torch_on_a_cpu_artifact(tiny_artifact, tmp_path):
    prefix = str(tmp_path / 'prof' / 'tiny')
    code = (
        'import sys\n'
        'from lamp_ros.cli import main\n'
        f'assert main(["verify", {tiny_artifact!r}]) == 0\n'
        f'assert main(["inspect", {tiny_artifact!r}, "--json"]) == 0\n'
        f'assert main(["diff", {tiny_artifact!r}, {tiny_artifact!r}]) == 0\n'
        f'assert main(["profile", {tiny_artifact!r}, "--out", {prefix!r}, "--ticks", "2", '
        '"--ort-runs", "1"]) == 0\n'
        'bad = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "tensorrt"))\n'
        'assert not bad, bad\n')
    result = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
