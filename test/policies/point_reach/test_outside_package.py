"""The plugin path: point_reach copied out of lamp_ros as a package of its own (`reach_outside`,
importable only where its folder is on PYTHONPATH), compiled and run as a user's policy is.
Its glue module is imported again when the artifact loads; where it is missing or changed since
the build, loading refuses with the reason; a glue that pulls in torch is refused at compile."""

import json
import os
import shutil
import subprocess
import sys

import yaml

SPEC = 'config/specs/point_reach.yaml'
PACKAGE = 'reach_outside'


def _lamp(args, pythonpath=None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    if pythonpath:
        env['PYTHONPATH'] = str(pythonpath)
    return subprocess.run([sys.executable, '-m', 'lamp_ros.cli', *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=300)


def _outside(tmp_path, glue_prefix: str = ''):
    """(folder to put on PYTHONPATH, spec path): point_reach as `reach_outside`."""
    folder = tmp_path / 'packages'
    shutil.copytree(os.path.join('lamp_ros', 'policies', 'point_reach'), folder / PACKAGE,
                    ignore=shutil.ignore_patterns('__pycache__'))
    glue = folder / PACKAGE / 'glue.py'
    glue.write_text(glue_prefix + glue.read_text())
    with open(SPEC, encoding='utf-8') as f:
        spec = yaml.safe_load(f)
    spec['policy']['entry'] = f'{PACKAGE}.pipeline:pipeline_from_spec'
    path = tmp_path / 'reach_outside.yaml'
    path.write_text(yaml.safe_dump(spec))
    return folder, path


def test_a_policy_outside_lamp_ros_compiles_runs_and_is_checked_at_load(tmp_path):
    folder, spec = _outside(tmp_path)
    out = tmp_path / 'artifact'
    built = _lamp(['compile', spec, '--out', out], folder)
    assert built.returncode == 0, built.stderr[-3000:]
    with open(out / 'plan.json', encoding='utf-8') as f:
        modules = {m for g in json.load(f)['groups'] for m in g['build'].get('modules', {})}
    assert modules == {f'{PACKAGE}.glue', PACKAGE}  # the glue and its package's __init__
    ran = _lamp(['run', out, '--ticks', '5', '--fast'], folder)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert _lamp(['verify', out], folder).returncode == 0

    missing = _lamp(['run', out, '--ticks', '5', '--fast'])  # not on PYTHONPATH
    assert missing.returncode != 0
    assert (f"host operators point_to_target: module '{PACKAGE}.glue' cannot be imported"
            in missing.stderr), missing.stderr[-2000:]
    verify = _lamp(['verify', out])
    assert verify.returncode != 0 and f"'{PACKAGE}.glue' cannot be imported" in \
        verify.stdout + verify.stderr

    glue = folder / PACKAGE / 'glue.py'
    glue.write_text(glue.read_text() + '\n# edited after the build\n')
    changed = _lamp(['run', out, '--ticks', '5', '--fast'], folder)
    assert changed.returncode != 0
    assert f'module {PACKAGE}.glue (' in changed.stderr and 'changed since the build' in \
        changed.stderr and 'rebuild the artifact' in changed.stderr, changed.stderr[-2000:]


def test_glue_that_imports_torch_is_refused_at_compile(tmp_path):
    """Host operators run where torch need not be installed: a glue module that imports it
    would not load on the robot, so `lamp compile` refuses it, naming the module and the
    import (the compiler has torch, so only a fresh import of the glue shows it)."""
    folder, spec = _outside(tmp_path, glue_prefix='import torch  # noqa: F401\n')
    out = tmp_path / 'artifact'
    built = _lamp(['compile', spec, '--out', out], folder)
    assert built.returncode == 2 and not out.exists()
    glue = folder / PACKAGE / 'glue.py'
    assert f'module {PACKAGE}.glue imports torch: {PACKAGE}.glue ({glue}:1) -> torch' in \
        built.stderr, built.stderr[-2000:]
