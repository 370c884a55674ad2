"""What `lamp compile` and loading check of a policy brought from outside lamp_ros
(docs/own-policy.md), on small real policies written into a package in tmp_path and compiled:
the modules of the policy's package its glue imports are pinned with the glue (a changed or
missing helper is refused at load like a changed glue, and so is a module the glue loads that
was not pinned); a glue that imports torch, even through a helper, is refused at compile; and
parity's camera left out on every third sample is named, with the spec key that turns it off.

The policies are host stages only (no model to export), so each compiles in about a second.
Each test writes a package of its own name: the compiled modules stay imported in this process
and their host operators registered (the fixture removes both afterwards)."""

import json
import os
import subprocess
import sys

import pytest
import yaml

import lamp_ros
from lamp_ros.artifact.manifest import ArtifactError
from lamp_ros.cli import main
from lamp_ros.ops.plugins import import_user_modules
from lamp_ros.ops.registry import HOST_OPS
from lamp_ros.runtime import Runtime
from lamp_ros.spec import parse_spec, SpecError

LAMP_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(lamp_ros.__file__)))
HELPER = '''import numpy as np

GAIN = np.float32(0.5)
'''

GLUE = '''"""Glue: the mean brightness of two cameras -> a chunk of small steps."""
import numpy as np

from lamp_ros.api import host_op

from {pkg} import helper
import {pkg}_dep  # noqa: F401 (a module outside the package: not pinned)


def to_chunk(base, wrist, state, horizon):
    level = (base.mean() + wrist.mean()) / 510.0 * helper.GAIN
    ramp = np.arange(1, horizon + 1, dtype=np.float32)[:, None]
    return (np.asarray(state, np.float32)[None] + 0.01 * ramp * level).astype(np.float32)


@host_op('{pkg}_chunk')
def _chunk(attrs, resources):
    horizon = int(attrs['horizon'])
    return lambda base, wrist, state: (to_chunk(base, wrist, state, horizon),)
'''

POLICY = '''from lamp_ros.api import control_pipeline, PolicyInterface, stage

from {pkg} import glue

HORIZON = 8


class Policy:
    interface = PolicyInterface(('base', 'wrist'), ('j1', 'j2'), action_horizon=HORIZON,
                                camera_sizes={{'base': (24, 32), 'wrist': (24, 32)}})

    def reset(self):
        pass

    @stage('{pkg}_chunk', 'postprocess', outputs=('chunk',),
           attrs=lambda self: {{'horizon': HORIZON}})
    def to_chunk(self, base, wrist, state):
        return glue.to_chunk(base, wrist, state, HORIZON)

    def infer(self, observation):  # needs both cameras
        images = observation.images
        return self.to_chunk(images['base'], images['wrist'], observation.state)


def pipeline_from_spec(spec, device='cpu'):
    return control_pipeline(Policy(), spec.control)
'''


def _spec(pkg: str, parity: dict | None = None) -> dict:
    return {'schema': 'lamp.spec/1', 'name': pkg, 'target': 'cpu',
            'policy': {'entry': f'{pkg}.policy:pipeline_from_spec'},
            'control': {'rate_hz': 20.0, 'chunker': {'replan_at': 4, 'merge_mode': 'latest'},
                        'smoother': {'mode': 'none'},
                        'clamp': {'lower': [-1.0, -1.0], 'upper': [1.0, 1.0],
                                  'max_step': [0.1, 0.1]}},
            'stages': {'default': {'backend': 'host'}},
            **({'parity': parity} if parity else {})}


@pytest.fixture
def package(tmp_path, monkeypatch):
    """write(helper=HELPER, parity=None) -> (package folder, spec path): the two-camera policy
    as a package named after the test, its folder on sys.path."""
    pkg = 'own_' + os.path.basename(str(tmp_path)).replace('-', '_')
    monkeypatch.syspath_prepend(str(tmp_path))
    ops = dict(HOST_OPS)

    def write(helper=HELPER, parity=None):
        folder = tmp_path / pkg
        folder.mkdir()
        (folder / '__init__.py').write_text('')
        (folder / 'helper.py').write_text(helper)
        (folder / 'glue.py').write_text(GLUE.format(pkg=pkg))
        (folder / 'policy.py').write_text(POLICY.format(pkg=pkg))
        (tmp_path / f'{pkg}_dep.py').write_text('DEP = 1\n')
        spec = tmp_path / f'{pkg}.yaml'
        spec.write_text(yaml.safe_dump(_spec(pkg, parity)))
        return folder, spec
    yield write
    for name in [m for m in sys.modules if m.startswith(pkg)]:
        del sys.modules[name]
    HOST_OPS.clear()
    HOST_OPS.update(ops)


def _compile(spec, out, capsys) -> tuple:
    code = main(['compile', str(spec), '--out', str(out)])
    return code, capsys.readouterr().err


def _forget(folder) -> None:
    """Drop the package's modules from this process, as a fresh robot process has none."""
    for name in [m for m in sys.modules if m.split('.')[0] == folder.name]:
        del sys.modules[name]


def test_a_changed_missing_or_unpinned_helper_of_the_glue_is_refused_at_load(
        package, tmp_path, capsys):
    folder, spec = package(parity={'missing_camera': False})
    pkg, out = folder.name, tmp_path / 'artifact'
    code, err = _compile(spec, out, capsys)
    assert code == 0, err[-3000:]
    with open(out / 'plan.json', encoding='utf-8') as f:
        (modules,) = [g['build']['modules'] for g in json.load(f)['groups']
                      if 'modules' in g['build']]
    # the glue, and what importing it alone loads of its package: the helper, the __init__
    assert sorted(modules) == [pkg, f'{pkg}.glue', f'{pkg}.helper']
    assert modules[f'{pkg}.glue']['imports'] == [pkg, f'{pkg}.helper']
    assert modules[f'{pkg}.helper']['ops'] == [] and modules[f'{pkg}.glue']['ops'] == \
        [f'{pkg}_chunk']
    with open(out / 'evidence' / 'parity.json', encoding='utf-8') as f:
        samples = json.load(f)['samples']
    assert [s['cameras'] for s in samples] == [['base', 'wrist']] * 4  # missing_camera: false
    _forget(folder)
    Runtime.load(str(out))  # unchanged: loads

    helper = folder / 'helper.py'
    helper.write_text(HELPER.replace('0.5', '0.25'))
    _forget(folder)
    with pytest.raises(ArtifactError) as changed:
        Runtime.load(str(out))
    assert f'module {pkg}.helper (imported by {pkg}.glue)' in str(changed.value)
    assert 'changed since the build' in str(changed.value)
    assert f'{pkg}.helper' not in sys.modules  # refused before any changed code ran

    helper.unlink()
    _forget(folder)
    with pytest.raises(ArtifactError) as missing:
        Runtime.load(str(out))
    assert f'module {pkg}.helper, which {pkg}.glue imported when the artifact was built, ' \
        'cannot be found' in str(missing.value)

    # a module the glue loads now that the build did not see (here: one the artifact's record
    # leaves out, since any change to a pinned source is refused before that)
    helper.write_text(HELPER)
    _forget(folder)
    unpinned = {name: entry for name, entry in modules.items() if name != f'{pkg}.helper'}
    unpinned[f'{pkg}.glue'] = {**modules[f'{pkg}.glue'], 'imports': [pkg]}
    with pytest.raises(ValueError, match=f'module {pkg}.glue now imports {pkg}.helper of its '
                                         'package, which the artifact was not built with'):
        import_user_modules(unpinned)

    # torch pulled in on the robot through a module outside the package (not pinned: here one
    # that changed after the build): a fresh process refuses to load
    (tmp_path / f'{pkg}_dep.py').write_text('import torch  # noqa: F401\n')
    load = f'from lamp_ros.runtime import Runtime; Runtime.load({str(out)!r})'
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join([str(tmp_path), LAMP_ROOT])}
    ran = subprocess.run([sys.executable, '-c', load], capture_output=True, text=True, env=env,
                         timeout=300)
    assert ran.returncode != 0
    assert f'module {pkg}.glue imports torch; host operators run on the robot without it' in \
        ran.stderr, ran.stderr[-2000:]


def test_a_glue_that_imports_torch_through_a_helper_is_refused_at_compile(package, tmp_path,
                                                                          capsys):
    folder, spec = package(helper='import torch  # noqa\n\n' + HELPER,
                           parity={'missing_camera': False})
    code, err = _compile(spec, tmp_path / 'artifact', capsys)
    pkg = folder.name
    assert code == 2, err[-3000:]
    assert f'lamp compile: error: host operators {pkg}_chunk: module {pkg}.glue imports ' \
        'torch' in err, err[-3000:]
    # the import, line by line: the glue's import of its helper, the helper's of torch
    chain = f'{pkg}.glue ({folder / "glue.py"}:6) -> {pkg}.helper ({folder / "helper.py"}:1)' \
        ' -> torch'
    assert chain in ' '.join(err.split()), err[-3000:]
    assert not (tmp_path / 'artifact').exists()


def test_a_policy_that_needs_every_camera_is_told_which_spec_key_says_so(package, tmp_path,
                                                                         capsys):
    _, spec = package()  # the policy indexes images['wrist']; parity leaves it out on sample 3
    code, err = _compile(spec, tmp_path / 'artifact', capsys)
    assert code == 2, err[-3000:]
    message = ' '.join(err.split())
    assert "parity sample 3/4 goes without camera 'wrist'" in message, message[-3000:]
    assert "KeyError: 'wrist'" in message and '`parity.missing_camera: false`' in message


@pytest.mark.parametrize('value', ['no', 0, None])
def test_parity_missing_camera_takes_true_or_false(value):
    raw = _spec('p', parity={'missing_camera': value})
    with pytest.raises(SpecError, match=r'parity\.missing_camera: true .* or false .*, got'):
        parse_spec(raw)


def test_parity_missing_camera_is_recorded_only_where_false():
    assert parse_spec(_spec('p')).parity_missing_camera
    on = parse_spec(_spec('p', parity={'missing_camera': True}))
    assert on.parity_missing_camera and 'missing_camera' not in on.to_dict()['parity']
    off = parse_spec(_spec('p', parity={'missing_camera': False}))
    assert not off.parity_missing_camera and off.to_dict()['parity']['missing_camera'] is False
