"""`lamp diff` names exactly the one thing that differs between two compiled artifacts.

Three variants of pi05_tiny, each one spec edit away from the base: the vision weights' seed,
the vision precision, the resize interpolation. The base is pi05_tiny with one prompt length
(`fusion.text_lengths: []`, a build other tests make anyway) and so is each variant: the group
is exported once per build, not at three lengths, and the lengths are no cause here (a diff of
them: test_passes.py test_plan_diff_names_the_prompt_lengths). Each is compiled once per
session (about 20 s each).
"""

import json
import os
import shutil

import pytest

from lamp_ros.artifact.manifest import write_manifest
from lamp_ros.cli import main
from lamp_ros.whitebox.diff import CAUSES, diff_artifacts


@pytest.fixture(scope='session')
def base(tiny_variant):
    """pi05_tiny at one prompt length, the base of the variants."""
    return tiny_variant('one_length')


@pytest.fixture(scope='session')
def variants(tiny_variant):
    """name -> artifact path of the base with one edit (see test/conftest.py)."""
    return {name: tiny_variant(f'{name}_one_length') for name in ('seed', 'fp16', 'area')}


def _diff_json(a, b, capsys) -> dict:
    assert main(['diff', a, b, '--json']) == 0
    return json.loads(capsys.readouterr().out)


def test_identical_artifact_has_no_changes(tiny_artifact, capsys):
    report = _diff_json(tiny_artifact, tiny_artifact, capsys)
    assert report['identical'] and report['changed'] == []
    for key in CAUSES:
        assert not report[key], key
    assert not report['evidence'] and not report['profile']
    assert main(['diff', tiny_artifact, tiny_artifact, '--fail-on-change']) == 0


def test_vision_seed_changes_vision_weights_only(base, variants, capsys):
    report = _diff_json(base, variants['seed'], capsys)
    assert list(report['nodes_changed']) == ['vision']
    change = report['nodes_changed']['vision']
    assert change['weights'] and change['hash'][0] != change['hash'][1]
    assert not change['attrs'] and not change['inputs'] and not change['outputs']
    assert not report['nodes_added'] and not report['nodes_removed']
    weights = report['weights_changed']
    assert weights and {w['node'] for w in weights} == {'vision'}
    assert all(w['max_abs_delta'] > 0 and w['shape'] for w in weights)
    assert {w['tensor'] for w in weights} == set(change['weights'])
    assert report['plan_changed'] == {} and report['memory'] == {}
    assert report['spec'] == {'weights': {'stage_seeds': {'vision': [None, 7]}}}  # the edit
    assert report['changed'] == ['spec', 'nodes_changed', 'weights_changed']


def test_vision_fp16_changes_the_plan_only(base, variants, capsys):
    report = _diff_json(base, variants['fp16'], capsys)
    assert report['nodes_changed'] == {} and report['weights_changed'] == []
    assert report['spec'] == {'stages': {'vision': {'precision': ['fp32', 'fp16']}}}
    plan = report['plan_changed']
    assert plan['nodes']['vision']['precision'] == ['fp32', 'fp16']
    assert 'precision' not in plan['nodes'].get('prefix', {})
    # Regrouping: vision leaves the fused fp32 group for an fp16 group of its own.
    assert [g['nodes'] for g in plan['groups_removed']] == [['vision', 'prefix', 'denoise']]
    added = {tuple(g['nodes']): g['precision'] for g in plan['groups_added']}
    assert added == {('vision',): 'fp16', ('prefix', 'denoise'): 'fp32'}
    assert plan['nodes']['prefix']['group'][1]['nodes'] == ['prefix', 'denoise']
    # Parity fails at 1e-4 in fp16: the evidence says so, as an effect.
    assert report['evidence']['passed'] == [True, False]


def test_interpolation_changes_the_three_preprocess_nodes(base, variants, capsys):
    report = _diff_json(base, variants['area'], capsys)
    slots = ('base', 'left_wrist', 'right_wrist')
    assert sorted(report['nodes_changed']) == [f'preprocess_image.{s}' for s in slots]
    for change in report['nodes_changed'].values():
        assert change['attrs'] == {'interpolation': ['linear', 'area']}
        assert not change['weights'] and not change['inputs'] and not change['outputs']
    assert report['weights_changed'] == [] and report['plan_changed'] == {}
    assert report['memory'] == {} and report['graph'] == [] and report['other_files'] == {}
    assert report['changed'] == ['spec', 'nodes_changed']


def test_fail_on_change_and_text_report(base, variants, capsys):
    assert main(['diff', base, variants['fp16']]) == 0
    text = capsys.readouterr().out
    assert 'precision fp32 -> fp16' in text and 'g02_onnxruntime[vision]' in text
    assert main(['diff', base, variants['area'], '--fail-on-change']) == 1


def _with_profile(src, dst, group_ms: dict, node_ms: dict) -> str:
    shutil.copytree(src, dst)

    def stats(ms):
        return {'count': 10, 'p50_ms': ms, 'p90_ms': ms, 'p99_ms': ms, 'max_ms': ms,
                'mean_ms': ms}
    profile = {'tick': stats(sum(group_ms.values())), 'inference': stats(sum(group_ms.values())),
               'groups': {k: stats(v) for k, v in group_ms.items()},
               'nodes': {k: stats(v) for k, v in node_ms.items()}, 'ticks': 10,
               'ops_by_type': [{'op_type': 'MatMul', 'ms': 3.0}]}
    with open(os.path.join(dst, 'evidence', 'profile.json'), 'w') as f:
        json.dump(profile, f)
    with open(os.path.join(dst, 'manifest.json')) as f:
        m = json.load(f)
    write_manifest(str(dst), m['target'], m['abi'], m['created_by'], m['name'])
    return str(dst)


def test_profile_deltas_name_the_top_hot_spot(tiny_artifact, tmp_path):
    a = _with_profile(tiny_artifact, tmp_path / 'a', {'g03_onnxruntime': 30.0, 'g01_host': 2.0},
                      {'stack_cameras': 0.6, 'tokenize': 0.2})
    b = _with_profile(tiny_artifact, tmp_path / 'b', {'g03_onnxruntime': 31.0, 'g01_host': 5.0},
                      {'stack_cameras': 3.1, 'tokenize': 0.1})
    report = diff_artifacts(a, b)
    assert report['identical']  # profiles are volatile evidence: the id does not move
    prof = report['profile']
    assert prof['groups']['g01_host']['delta_ms'] == pytest.approx(3.0)
    assert prof['nodes']['tokenize']['delta_ms'] == pytest.approx(-0.1)
    assert prof['top_hot_spot'] == {'kind': 'group', 'name': 'g01_host',
                                    'delta_ms': pytest.approx(3.0)}


def test_build_evidence_differs_apart_from_behaviour(tiny_artifact, tmp_path, capsys):
    """Two builds of one spec that measured differently (stage timings, how each tuned tile
    was chosen): the same id, no cause changed, the evidence that differs listed on its own."""
    edited = tmp_path / 'edited'
    shutil.copytree(tiny_artifact, edited)
    path = edited / 'evidence' / 'build.json'
    build = json.loads(path.read_text())
    build['stage_seconds']['trace'] += 1.0
    build['groups'] = {'g03_cuda': {'tuning': {'linear 8x16x32': {'source': 'tile cache'}}}}
    path.write_text(json.dumps(build))
    m = json.loads((edited / 'manifest.json').read_text())
    write_manifest(str(edited), m['target'], m['abi'], m['created_by'], m['name'])
    report = diff_artifacts(tiny_artifact, str(edited))
    assert report['identical'] and report['changed'] == [] and report['files'] == {}
    assert report['evidence_files'] == {'evidence/build.json': [
        'groups.g03_cuda', 'stage_seconds.trace']}
    assert main(['diff', tiny_artifact, str(edited), '--fail-on-change']) == 0
    text = capsys.readouterr().out
    assert 'causes changed: none' in text
    assert 'evidence/build.json: groups.g03_cuda, stage_seconds.trace' in text


def test_plan_diff_names_a_side_stream():
    """Switching fusion.side_stream on changes one attribute of the cuda group, and says so."""
    from dataclasses import replace
    from lamp_ros.artifact.plan import BuildPlan
    from lamp_ros.artifact.plan import GroupSpec
    from lamp_ros.whitebox.diff import diff_plan
    group = GroupSpec('g03_cuda', 'cuda', 'bf16', 'cuda:0', ('vision', 'prefix', 'denoise'),
                      ('stack_cameras.pixels',), ('denoise.actions',))
    one = BuildPlan('cuda', (group,), {}, {})
    two = BuildPlan('cuda', (replace(group, side_stages=('denoise',)),), {}, {})
    assert diff_plan(one, two) == {
        'groups_changed': {'g03_cuda': {'side_stages': [[], ['denoise']]}}}
    assert diff_plan(two, two) == {}


def test_plan_diff_names_the_prompt_lengths():
    """Switching fusion.text_lengths on changes the cuda group's build (`build.text`, which the
    runner captures from), and the diff says which lengths."""
    from dataclasses import replace
    from lamp_ros.artifact.plan import BuildPlan
    from lamp_ros.artifact.plan import GroupSpec
    from lamp_ros.whitebox.diff import diff_plan
    group = GroupSpec('g03_cuda', 'cuda', 'bf16', 'cuda:0', ('vision', 'prefix', 'denoise'),
                      ('stack_cameras.pixels', 'tokenize.token_ids', 'tokenize.token_mask'),
                      ('denoise.actions',), build={'text': None})
    text = {'inputs': ['tokenize.token_ids', 'tokenize.token_mask'],
            'mask': 'tokenize.token_mask', 'lengths': [64, 128, 200]}
    one = BuildPlan('cuda', (group,), {}, {})
    two = BuildPlan('cuda', (replace(group, build={'text': text}),), {}, {})
    assert diff_plan(one, two) == {
        'groups_changed': {'g03_cuda': {'text_lengths': [[], [64, 128, 200]]}}}
    assert diff_plan(two, two) == {}


def test_plan_diff_names_stored_gemm_algorithms():
    """A build that stored cuBLASLt algorithms (plan.json `build.cublaslt`: the spec's
    build.gemm_algorithms, or another build GPU) shows in the diff: how many linears, where
    measured."""
    from dataclasses import replace
    from lamp_ros.artifact.plan import BuildPlan
    from lamp_ros.artifact.plan import GroupSpec
    from lamp_ros.whitebox.diff import diff_plan
    group = GroupSpec('g03_cuda', 'cuda', 'bf16', 'cuda:0', ('vision', 'prefix', 'denoise'),
                      ('stack_cameras.pixels',), ('denoise.actions',), build={'cublaslt': None})
    stored = {'cublaslt': 130100, 'gpu': 'NVIDIA H200', 'linears': 34, 'rows': {'832': 34}}
    one = BuildPlan('cuda', (group,), {}, {})
    two = BuildPlan('cuda', (replace(group, build={'cublaslt': stored}),), {}, {})
    assert diff_plan(one, two) == {
        'groups_changed': {'g03_cuda': {'gemm_algorithms': [None, stored]}}}
    assert diff_plan(two, two) == {}


def test_plan_diff_names_passes_build_options_and_the_onnx_exporter():
    """A pass switched off, a spec build option and the exporter that wrote an ONNX group are
    causes a diff names (plan.json `passes`, `options`, group `build.exporter`)."""
    from dataclasses import replace
    from lamp_ros.artifact.plan import BuildPlan
    from lamp_ros.artifact.plan import GroupSpec
    from lamp_ros.whitebox.diff import diff_plan
    from lamp_ros.whitebox.diff_report import _plan_lines
    group = GroupSpec('g02_onnxruntime', 'onnxruntime', 'fp32', 'cpu', ('network',),
                      ('stack_cameras.pixels',), ('network.actions',),
                      build={'exporter': 'dynamo'})
    one = BuildPlan('cpu', (group,), {}, {}, passes=('fold_constants', 'fuse_attention'),
                    options={'onnx_exporter': 'auto', 'expert_pdl': 2})
    two = BuildPlan('cpu', (replace(group, build={'exporter': 'torchscript'}),), {}, {},
                    passes=('fuse_attention',),
                    options={'onnx_exporter': 'torchscript', 'expert_pdl': 2})
    change = diff_plan(one, two)
    assert change == {
        'passes': [['fold_constants', 'fuse_attention'], ['fuse_attention']],
        'options': {'onnx_exporter': ['auto', 'torchscript']},
        'groups_changed': {'g02_onnxruntime': {'exporter': ['dynamo', 'torchscript']}}}
    lines = _plan_lines(change)
    assert lines[:2] == ['passes -fold_constants', 'build.onnx_exporter auto -> torchscript']
    assert diff_plan(two, two) == {}
