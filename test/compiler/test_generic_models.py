"""Model stages any policy may have compile like pi0.5's: one without any weight (a fixed
function), one with a 0-d parameter, in a policy without cameras or prompt. The policy is
written here as a user would, in a module of its own."""

import json
import os
import textwrap

import numpy as np
import pytest

POLICY = textwrap.dedent('''
    import torch
    from torch import nn

    from lamp_ros.api import (control_pipeline, model_stage, PassResult, PolicyInterface,
                              register_rewrites, Rewrites)


    class Doubler(nn.Module):  # no parameters, no buffers
        def forward(self, state):
            return torch.tanh(2.0 * state.float())


    class Gain(nn.Module):
        def __init__(self):
            super().__init__()
            self.gain = nn.Parameter(torch.tensor(0.75))  # a 0-d weight
            self.out = nn.Linear(2, 2 * 10)

        def forward(self, x):
            return (self.gain * self.out(x)).reshape(10, 2)


    class Blind:
        def __init__(self):
            torch.manual_seed(0)
            self.doubler, self.head = Doubler(), Gain().eval()

        interface = PolicyInterface((), ('a', 'b'), prompt=False, action_horizon=10,
                                    state_low=(-1.0, -1.0), state_high=(1.0, 1.0))

        def reset(self):
            pass

        double = model_stage('double', 'doubler', outputs=('x',))
        gain = model_stage('gain', 'head', outputs=('chunk',))

        def infer(self, observation):
            return self.gain(self.double(observation.state))  # handed on as it came


    def noop(modules):  # a pass that finds nothing to do in this pipeline
        return modules, PassResult(False)


    def halve_gain(modules):
        import copy
        head = copy.deepcopy(modules['gain'])
        with torch.no_grad():
            head.gain.mul_(0.5)
            head.out.weight.mul_(2.0)
            head.out.bias.mul_(2.0)
        return {**modules, 'gain': head}, PassResult(True, {'gain': {'halved': 1}})


    register_rewrites(Blind, Rewrites(passes=(noop, halve_gain)))


    def pipeline_from_spec(spec, device='cpu'):
        return control_pipeline(Blind(), spec.control)
''')

SPEC = {
    'schema': 'lamp.spec/1', 'name': 'blind',
    'policy': {'entry': 'blind_policy:pipeline_from_spec'},
    'control': {'rate_hz': 22.0, 'chunker': {'replan_at': 5, 'merge_mode': 'latest'},
                'smoother': {'mode': 'none'},
                'clamp': {'lower': [-1, -1], 'upper': [1, 1], 'max_step': [0.5, 0.5]}},
    'target': 'cpu',
    'stages': {'default': {'backend': 'host'},
               'double': {'backend': 'onnxruntime'}, 'gain': {'backend': 'onnxruntime'}},
}


def _compile(tmp_path, monkeypatch, **changes):
    from lamp_ros.compiler.build import compile_spec
    (tmp_path / 'blind_policy.py').write_text(POLICY)
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = tmp_path / 'blind.yaml'
    spec.write_text(json.dumps({**SPEC, **changes}))  # JSON is YAML
    return compile_spec(str(spec), str(tmp_path / 'artifact'))


def test_weightless_and_scalar_weight_stages_compile_without_cameras(tmp_path, monkeypatch):
    from lamp_ros.runtime import Runtime
    from lamp_ros.runtime.loop import run_ticks
    result = _compile(tmp_path, monkeypatch)
    assert result.parity_passed, result.parity
    with open(tmp_path / 'artifact' / 'manifest.json', encoding='utf-8') as f:
        abi = json.load(f)['abi']
    assert abi['camera_slots'] == [] and abi['prompt'] is False
    assert not os.path.exists(tmp_path / 'artifact' / 'weights' / 'double.safetensors') or \
        os.path.getsize(tmp_path / 'artifact' / 'weights' / 'double.safetensors') < 1000
    runtime = Runtime.load(str(tmp_path / 'artifact'))
    commands = run_ticks(runtime, 12, realtime=False)
    assert all(c is not None and np.isfinite(c).all() for _, c in commands)
    # no cameras, no prompt: the observation is the state alone
    assert np.isfinite(runtime.step({'state': np.array([0.3, -0.2])}, 1.0)).all()


def test_only_passes_that_changed_something_are_recorded(tmp_path, monkeypatch):
    """A pass switched on that found nothing to do is said at compile time and kept out of
    plan.json's applied passes (evidence/build.json lists it); parity holds either way."""
    result = _compile(tmp_path, monkeypatch, passes={'noop': True, 'halve_gain': True})
    assert result.parity_passed
    root = tmp_path / 'artifact'
    with open(root / 'plan.json', encoding='utf-8') as f:
        assert json.load(f)['passes'] == ['halve_gain']
    with open(root / 'evidence' / 'build.json', encoding='utf-8') as f:
        assert json.load(f)['passes_without_effect'] == ['noop']


@pytest.mark.parametrize('changes,message', [
    ({'stages': {**SPEC['stages'], 'vision': {'backend': 'onnxruntime'}}},
     "stages.vision: the traced pipeline has no stage 'vision' \\(its stages: chunker, clamp, "
     'double, gain, smoother\\)'),
    ({'fusion': {'text_lengths': [16]}},
     "fusion.text_lengths: the traced pipeline has no 'tokenize' stage"),
    ({'fusion': {'split_after': ['prefix']}},
     "fusion.split_after: \\['prefix'\\] are not stages of the traced pipeline"),
])
def test_a_spec_option_the_pipeline_cannot_use_is_an_error(
        tmp_path, monkeypatch, changes, message):
    with pytest.raises(ValueError, match=message):
        _compile(tmp_path, monkeypatch, **changes)
