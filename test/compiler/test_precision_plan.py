"""The precision plan (compiler/precision_plan.py, backends/onnx_int8.py): the demo policy built
with `precision: {plan: auto}` (config/specs/pi05_tiny_int8.yaml) by the real compiler, ONNX
Runtime's quantizer and calibrator, and the Runtime; the plan's choices against its budget,
the back-off, and the refusals of a precision that is not really run."""

import json
import os

import numpy as np
import pytest
from conftest import calibrated_int8_lowering, DEMO_SPEC

from lamp_ros.artifact.load import open_artifact
from lamp_ros.artifact.manifest import list_files, read_manifest
from lamp_ros.cli import main
from lamp_ros.backends import onnx_int8
from lamp_ros.backends.onnx_int8 import PrecisionError
from lamp_ros.compiler.parity import parity_observations
from lamp_ros.compiler.precision_plan import (action_error, calibration_observations, choose,
                                              PrecisionPlanError)
from lamp_ros.spec import load_spec, parse_spec, SpecError
from lamp_ros.spec.precision import Budget
from lamp_ros.trace.from_spec import build_pipeline

INT8_SPEC = 'config/specs/pi05_tiny_int8.yaml'


def _evidence(artifact):
    with open(os.path.join(artifact, 'evidence', 'precision.json')) as f:
        evidence = json.load(f)
    (group,) = evidence['groups'].items()
    return evidence, group[0], group[1]


def test_the_plan_stays_within_its_budget_and_says_why_for_every_layer(int8_artifact):
    evidence, name, group = _evidence(int8_artifact)
    budget = Budget(**evidence['budget'])
    assert evidence['calibration']['observations'] == 8
    assert group['chosen'], 'the demo policy has layers that int8 leaves within the budget'
    for layer in group['chosen']:
        row = group['layers'][layer]
        assert budget.allows(row['cosine'], row['max_rel']) and row['eligible'], layer
    combined = group['combined']
    assert combined['within_budget'] and budget.allows(combined['cosine'], combined['max_rel'])
    assert 0 < group['macs_lowered'] < group['macs_candidates']
    for tensor, (low, high) in group['activation_ranges'].items():
        assert low <= high, tensor
    artifact = open_artifact(int8_artifact)
    build = next(g.build for g in artifact.plan.groups if g.name == name)
    decisions = build['precision_plan']['layers']
    assert set(decisions) == set(group['layers'])  # every candidate layer, with a reason
    assert sorted(build['int8_layers']) == sorted(group['chosen'])
    for layer, decision in decisions.items():
        assert decision['precision'] == ('int8' if layer in group['chosen'] else 'fp32')
        assert decision['why']
    # the denoise loop's state stays float32 (the policy's loop_state_layers)
    for layer in ('denoise.action_in_proj', 'denoise.action_out_proj'):
        assert decisions[layer]['precision'] == 'fp32'
        assert 'loop state' in decisions[layer]['why']
    assert os.path.getsize(os.path.join(int8_artifact, 'evidence', 'precision.png')) > 10_000
    with open(os.path.join(int8_artifact, 'evidence', 'parity.json')) as f:
        assert json.load(f)['passed']


def _group_bytes(artifact: str) -> int:
    return sum(os.path.getsize(os.path.join(artifact, f)) for f in list_files(artifact)
               if f.startswith('groups/'))


def test_the_artifact_holds_the_chosen_model_and_no_candidates(int8_artifact, demo_artifact,
                                                               capsys):
    """The trial models (every layer alone, every verified set) stay out of the artifact: its
    group files are the ones the plan runs, its manifest lists exactly what is on disk, and it
    verifies. The measurements of the trials are in evidence/precision.json."""
    files = list_files(int8_artifact)
    assert not [f for f in files if '.precision' in f]
    (build,) = [g.build for g in open_artifact(int8_artifact).plan.groups
                if g.build.get('precision_plan')]
    runs = {build['onnx']} | {b['file'] for b in build['weights'].values()}
    assert {f for f in files if f.startswith('groups/')} == \
        {f for f in runs if f.startswith('groups/')}
    assert build['onnx'].endswith('model.int8.onnx')
    manifest = read_manifest(int8_artifact)
    assert set(manifest['files']) | set(manifest['volatile']) == set(files)
    # the fp32 model plus its int8 weights, not some eighty copies of the group (~66 MB)
    assert _group_bytes(int8_artifact) < 2 * _group_bytes(demo_artifact)
    assert main(['verify', int8_artifact]) == 0
    assert 'verified' in capsys.readouterr().out


def test_the_set_backs_off_layer_by_layer_until_it_fits(int8_artifact):
    """Every layer lowered alone fits the budget, but not all of them at once: the build
    backed the last-ranked off, one at a time, each verified, until the set fitted."""
    evidence, name, group = _evidence(int8_artifact)
    budget = Budget(**evidence['budget'])
    steps = group['steps']
    assert len(steps) >= 2 and not steps[0]['within_budget'] and steps[-1]['within_budget']
    assert [s['layers'] for s in steps] == list(range(steps[0]['layers'],
                                                      steps[-1]['layers'] - 1, -1))
    backed_off = [s['backed_off'] for s in steps[:-1]]
    assert not set(backed_off) & set(group['chosen'])
    for layer in backed_off:
        row = group['layers'][layer]
        assert budget.allows(row['cosine'], row['max_rel'])  # it fitted alone
    decisions = next(g.build for g in open_artifact(int8_artifact).plan.groups
                     if g.name == name)['precision_plan']['layers']
    assert all(decisions[layer]['why'].startswith('backed off') for layer in backed_off)


def test_choose_ranks_by_work_per_error_and_backs_off_the_last():
    """The greedy rule on its own: a layer over the budget alone is never tried, the rest
    are ranked by multiply-adds per unit of error, and the last-ranked goes first."""
    table = {'big_exact': {'macs': 100, 'cosine': 0.99999, 'max_rel': 1e-4, 'eligible': True},
             'big_noisy': {'macs': 100, 'cosine': 0.9992, 'max_rel': 1e-2, 'eligible': True},
             'small': {'macs': 10, 'cosine': 0.99999, 'max_rel': 1e-3, 'eligible': True},
             'too_far': {'macs': 1000, 'cosine': 0.99, 'max_rel': 0.5, 'eligible': True},
             'loop': {'macs': 1000, 'cosine': 1.0, 'max_rel': 0.0, 'eligible': False}}
    budget = Budget(cosine=0.999, max_rel=2e-2)
    tried = []

    def verify(layers):  # errors add up: the set is over the budget with big_noisy in it
        tried.append(list(layers))
        max_rel = sum(table[n]['max_rel'] for n in layers) * 2
        return {'cosine': 1 - sum(1 - table[n]['cosine'] for n in layers), 'max_rel': max_rel}
    chosen, steps = choose(table, budget, verify)
    assert tried[0] == ['big_exact', 'small', 'big_noisy']
    assert chosen == ['big_exact', 'small']
    assert steps[0]['backed_off'] == 'big_noisy' and steps[-1]['within_budget']


def test_action_error_is_cosine_and_relative_error_and_flags_non_finite():
    ref = [np.array([[1.0, 2.0], [3.0, 4.0]])]
    assert action_error(ref, ref) == {'cosine': 1.0, 'max_rel': 0.0}
    err = action_error([ref[0] + 0.4], ref)
    assert err['max_rel'] == pytest.approx(0.1) and err['cosine'] < 1.0
    bad = ref[0].copy()
    bad[0, 0] = np.nan
    assert action_error([bad], ref)['non_finite']


@pytest.fixture(scope='module')
def lowering(demo_artifact, tmp_path_factory):
    """The int8 lowering of a copy of the demo artifact's ONNX Runtime group, calibrated on
    two parity observations."""
    return calibrated_int8_lowering(demo_artifact, tmp_path_factory, 2)[1]


def test_a_layer_left_in_float_by_the_quantizer_is_refused_by_name(lowering):
    with pytest.raises(PrecisionError, match='layer vision.blocks.0.fc1 was asked for in int8, '
                                             'but ONNX Runtime\'s quantizer left its MatMul'):
        lowering._check_lowered(lowering.model, ['vision.blocks.0.fc1'])  # the float model


def test_an_int8_layer_that_ort_would_run_in_float_is_refused_by_name(lowering, monkeypatch):
    """With ORT's MatMul + bias fusion left on, the int8 weight of a layer with a bias is only
    dequantized into a float Gemm: int8 in the file, float in the run. Refused by name."""
    monkeypatch.setattr(onnx_int8, 'DISABLED_OPTIMIZERS', ())
    with pytest.raises(PrecisionError, match='layer vision.blocks.0.fc1 is int8 in the model, '
                                             'but ONNX Runtime runs it as'):
        lowering.lower(['vision.blocks.0.fc1'], 'refused')
    lowered = lowering.lower(['denoise.layers.0.mlp.down_proj'], 'no_bias')  # no bias: fused
    assert lowered['int8_layers'] == ['denoise.layers.0.mlp.down_proj']


def test_unknown_layers_are_refused(lowering):
    with pytest.raises(PrecisionError, match=r"no int8 candidate layer \['vision.nope'\]"):
        lowering.lower(['vision.nope'], 'x')


def test_candidates_are_the_weights_that_matmuls_read(lowering):
    """One candidate per weight: the expert's 10 unrolled Euler steps read each of its
    weights, the prefix and vision once; attention's QK and PV read no weight."""
    layers = lowering.candidates
    assert len(layers['denoise.layers.0.mlp.down_proj'].nodes) == 10
    assert len(layers['prefix.layers.0.attn.o_proj'].nodes) == 1
    assert all(c.macs > 0 for c in layers.values())
    assert not [n for n in layers if 'attn' in n and not n.endswith('_proj')]


def _spec(precision: dict) -> dict:
    return {'name': 'x', 'policy': {'entry': 'a:b'}, 'target': 'cpu', 'precision': precision}


@pytest.mark.parametrize('precision, message', [
    ({'plan': 'fast'}, "precision.plan: one of manual, auto, got 'fast'"),
    ({'budget': {'cosine': 2}}, r'precision.budget.cosine: a number in \[-1.0, 1.0\]'),
    ({'budget': {'snr': 1}}, 'precision.budget.snr: unknown key'),
    ({'calibration': {'source': 'npz'}}, 'precision.calibration.path: the folder'),
    ({'calibration': {'source': 'parity', 'path': 'x'}}, 'only for source npz'),
    ({'calibration': {'samples': 0}}, r'precision.calibration.samples: an integer >= 1'),
    ({'lower_loop_state': 'yes'}, 'precision.lower_loop_state: true or false'),
])
def test_bad_precision_sections_are_refused_by_key(precision, message):
    with pytest.raises(SpecError, match=message):
        parse_spec(_spec(precision))


def test_a_spec_without_a_plan_keeps_its_id():
    """spec.json holds `precision` only where a spec plans: every other artifact's id stays."""
    assert 'precision' not in load_spec(DEMO_SPEC).to_dict()
    assert load_spec(INT8_SPEC).to_dict()['precision']['plan'] == 'auto'


def test_npz_observations_calibrate_and_bad_files_are_named(tmp_path):
    pipeline = build_pipeline(load_spec(DEMO_SPEC))
    for i, obs in enumerate(parity_observations(pipeline, 3)):
        np.savez(tmp_path / f'{i:03d}.npz', state=obs['state'], prompt=obs['prompt'],
                 **{f'images.{slot}': img for slot, img in obs['images'].items()})
    spec = parse_spec({**_spec({'plan': 'auto', 'calibration': {
        'source': 'npz', 'path': str(tmp_path), 'samples': 2}})})
    got = calibration_observations(spec, pipeline)
    assert len(got) == 2 and got[0]['prompt'] == parity_observations(pipeline, 1)[0]['prompt']
    np.testing.assert_array_equal(got[1]['state'], parity_observations(pipeline, 2)[1]['state'])
    np.savez(tmp_path / '000.npz', images=np.zeros(3))
    with pytest.raises(PrecisionPlanError, match='000.npz: no array `state`'):
        calibration_observations(spec, pipeline)
    empty = parse_spec(_spec({'calibration': {'source': 'npz', 'path': str(tmp_path / 'no')}}))
    with pytest.raises(PrecisionPlanError, match='no folder'):
        calibration_observations(empty, pipeline)


def test_inspect_says_how_many_layers_the_plan_lowered(int8_artifact, capsys):
    from lamp_ros.whitebox.inspect import _members
    evidence, name, group = _evidence(int8_artifact)
    assert main(['inspect', int8_artifact, '--json']) == 0
    (shown,) = [g for g in json.loads(capsys.readouterr().out)['groups'] if g['name'] == name]
    assert set(shown['precision_plan']['layers']) == set(group['layers'])
    assert (f'precision plan: {len(group["chosen"])} of {len(group["layers"])} layers in int8'
            in _members(shown))
