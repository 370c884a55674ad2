"""torch's two ONNX exporters behind build.onnx_exporter (backends/onnx_export.py): `auto`
takes the torch.export-based one and falls back to TorchScript where it cannot translate an
operator; naming one exporter makes its failure the build's error; the plan says which wrote
the file and the evidence why it fell back. What each exporter can write is torch's: the
operators here are ones this torch's exporters disagree on (cdist: only TorchScript; roll:
only the torch.export-based one), and every file is run by ONNX Runtime against torch."""

import json
import textwrap

import numpy as np
import onnxruntime as ort
import pytest
import torch

from lamp_ros.backends.onnx_export import export_model, ExportError


class Distances(torch.nn.Module):  # aten._cdist_forward has no torch.export-based translation
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(3, 3)

    def forward(self, x):
        return torch.cdist(self.proj(x), x)


class Rolled(torch.nn.Module):  # TorchScript's aten::roll needs explicit dims
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(3, 3)

    def forward(self, x):
        return torch.roll(self.proj(x), 1)


class Group(torch.nn.Module):
    """The weights named as a group's are: stages.<node>.<param>."""

    def __init__(self, stage):
        super().__init__()
        self.stages = torch.nn.ModuleDict({'net': stage})

    def forward(self, x):
        return self.stages['net'](x)


def _export(stage, exporter, tmp_path, said=None):
    torch.manual_seed(0)
    module = Group(stage).eval()
    x = torch.rand(4, 3)
    model, used, failure = export_model(module, [x], str(tmp_path / 'model.onnx'), 18, ['x'],
                                        ['y'], 'stages.', exporter, say=said)
    session = ort.InferenceSession(model.SerializeToString())
    (y,) = session.run(None, {'x': x.numpy()})
    with torch.no_grad():
        np.testing.assert_allclose(y, module(x).numpy(), rtol=1e-5, atol=1e-5)
    return model, used, failure


def test_auto_takes_the_torch_export_based_exporter_where_it_translates(tmp_path):
    model, used, failure = _export(Rolled(), 'auto', tmp_path)
    assert (used, failure) == ('dynamo', None)
    assert {i.name for i in model.graph.initializer} >= {'stages.net.proj.weight',
                                                         'stages.net.proj.bias'}
    assert not [n for n in model.graph.node if n.metadata_props]


def test_auto_falls_back_to_torchscript_and_says_why(tmp_path):
    said = []
    _, used, failure = _export(Distances(), 'auto', tmp_path, said.append)
    assert used == 'torchscript'
    assert 'aten._cdist_forward' in failure and failure.startswith('DispatchError')
    assert len(said) == 1 and 'exporting with TorchScript' in said[0] and failure in said[0]


def test_a_named_exporter_has_no_fallback(tmp_path):
    with pytest.raises(ExportError, match='the torch.export-based ONNX exporter failed '
                                          r'\(DispatchError: .*aten\._cdist_forward'):
        _export(Distances(), 'dynamo', tmp_path)
    with pytest.raises(ExportError, match=r'the TorchScript ONNX exporter failed '
                                          r'\(AssertionError: len\(shifts\).*; '
                                          'build.onnx_exporter: auto or dynamo would try'):
        _export(Rolled(), 'torchscript', tmp_path)
    assert _export(Distances(), 'torchscript', tmp_path)[1:] == ('torchscript', None)


POLICY = textwrap.dedent('''
    import torch
    from torch import nn

    from lamp_ros.api import control_pipeline, model_stage, PolicyInterface


    class Spread(nn.Module):
        """Pairwise distances of the joint state's entries: torch.cdist."""
        def __init__(self):
            super().__init__()
            self.out = nn.Linear(3, 3 * 5)

        def forward(self, state):
            points = state.float().reshape(3, 1)
            return self.out(torch.cdist(points, points).sum(0)).reshape(5, 3)


    class SpreadPolicy:
        interface = PolicyInterface((), ('a', 'b', 'c'), prompt=False, action_horizon=5)

        def __init__(self):
            torch.manual_seed(0)
            self.net = Spread().eval()

        def reset(self):
            pass

        spread = model_stage('spread', 'net', outputs=('chunk',))

        def infer(self, observation):
            return self.spread(observation.state)


    def pipeline_from_spec(spec, device='cpu'):
        return control_pipeline(SpreadPolicy(), spec.control)
''')


def test_the_plan_says_which_exporter_wrote_the_group(tmp_path, monkeypatch):
    from lamp_ros.compiler.build import compile_spec
    (tmp_path / 'spread_policy.py').write_text(POLICY)
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = {'schema': 'lamp.spec/1', 'name': 'spread',
            'policy': {'entry': 'spread_policy:pipeline_from_spec'},
            'control': {'chunker': {'replan_at': 3, 'merge_mode': 'latest'},
                        'smoother': {'mode': 'none'},
                        'clamp': {'lower': [-9] * 3, 'upper': [9] * 3, 'max_step': [9] * 3}},
            'target': 'cpu',
            'stages': {'default': {'backend': 'host'}, 'spread': {'backend': 'onnxruntime'}}}
    (tmp_path / 'spread.yaml').write_text(json.dumps(spec))
    result = compile_spec(str(tmp_path / 'spread.yaml'), str(tmp_path / 'artifact'))
    assert result.parity_passed, result.parity
    with open(tmp_path / 'artifact' / 'plan.json', encoding='utf-8') as f:
        (group,) = [g for g in json.load(f)['groups'] if g['backend'] == 'onnxruntime']
    assert group['build']['exporter'] == 'torchscript'
    with open(tmp_path / 'artifact' / 'evidence' / 'build.json', encoding='utf-8') as f:
        evidence = json.load(f)['groups'][group['name']]
    assert 'aten._cdist_forward' in evidence['exporter_fallback']
