"""`lamp diff` names whatever makes two artifact ids differ: the precision plan of the demo
policy's int8 build (its lowered layers, by name), and each other kind of content of the id
edited alone in a copy of a real artifact (plan, memory plan, graph, resources, a group's
program, the manifest's own fields), none of which may leave `causes changed: none`."""

import json
import os
import shutil

import pytest

from lamp_ros.artifact.manifest import read_manifest, write_manifest
from lamp_ros.artifact.plan import BuildPlan, GroupSpec
from lamp_ros.cli import main
from lamp_ros.whitebox.diff import diff_artifacts
from lamp_ros.whitebox.diff_report import _precision_lines
from lamp_ros.whitebox.plan_diff import diff_precision_plans


def test_the_int8_plan_is_named_layer_by_layer(demo_artifact, int8_artifact, capsys):
    """The demo policy against its int8 precision plan (config/specs/pi05_tiny_int8.yaml): the
    diff names the group's plan and every layer it lowered, each with its reason."""
    with open(os.path.join(int8_artifact, 'evidence', 'precision.json')) as f:
        (name, evidence), = json.load(f)['groups'].items()
    chosen = sorted(evidence['chosen'])
    assert main(['diff', demo_artifact, int8_artifact, '--json']) == 0
    report = json.loads(capsys.readouterr().out)
    assert not report['identical'] and 'precision_plan' in report['changed']
    plan = report['precision_plan'][name]
    assert plan['lowered_to'] == [None, 'int8'] and plan['lowered'] == chosen
    assert plan['restored'] == [] and plan['low_precision'] == [
        [0, 0], [len(chosen), len(evidence['layers'])]]
    assert set(plan['layers']) == set(evidence['layers'])  # every candidate, with its reason
    # the lowered model is its own build entry; nothing else of the id is left unexplained
    build = report['plan_changed']['groups_changed'][name]['build']
    assert build['int8_layers'] == [None, chosen]
    assert build['onnx'][1].endswith('model.int8.onnx')
    assert report['other_files'] == {}
    assert report['spec']['precision'][0] is None
    assert main(['diff', demo_artifact, int8_artifact, '--fail-on-change']) == 1
    text = capsys.readouterr().out
    assert 'causes changed: none' not in text
    assert f'group {name}: no plan -> {len(chosen)} of {len(evidence["layers"])} layers in ' \
           'int8' in text
    for layer in chosen:
        assert f'+ {layer} in int8: within the budget alone and in the set' in text


def _plan(layers: dict, lowered_to: str = 'fp8') -> BuildPlan:
    record = {'lowered_to': lowered_to, 'timed_on': 'NVIDIA H200',
              'layers': {n: {'precision': p, 'why': w} for n, (p, w) in layers.items()}}
    group = GroupSpec('g03_cuda', 'cuda', 'bf16', 'cuda:0', ('vision', 'prefix', 'denoise'),
                      ('stack_cameras.pixels',), ('denoise.actions',),
                      build={'precision_plan': record})
    return BuildPlan('cuda', (group,), {}, {})


def test_two_plans_differ_by_the_layers_each_lowers():
    """Two FP8 plans of one group: the layers lowered in B only, those back in bf16, and a
    layer whose reason changed, each named."""
    fits = 'within the budget alone and in the set'
    a = _plan({'x': ('fp8', fits), 'y': ('fp8', fits), 'z': ('bf16', 'alone it exceeds the '
                                                             'budget')})
    b = _plan({'x': ('fp8', fits), 'y': ('bf16', 'backed off: the set exceeded the budget '
                                                 'with it'), 'z': ('fp8', fits)})
    change = diff_precision_plans(a, b)['g03_cuda']
    assert change['lowered'] == ['z'] and change['restored'] == ['y']
    assert change['low_precision'] == [[2, 3], [2, 3]] and 'x' not in change['layers']
    assert diff_precision_plans(a, a) == {}
    lines = _precision_lines({'g03_cuda': change})
    assert lines[:3] == ['group g03_cuda: 2 of 3 layers in fp8 -> 2 of 3 layers in fp8',
                         f'+ z in fp8: {fits}',
                         '- y back in bf16: backed off: the set exceeded the budget with it']


def _edit_json(root, rel: str, edit) -> None:
    path = os.path.join(root, rel)
    with open(path) as f:
        data = json.load(f)
    edit(data)
    with open(path, 'w') as f:
        json.dump(data, f, indent=1, sort_keys=True)


def _onnx_group(plan: dict) -> dict:
    return next(g for g in plan['groups'] if g['backend'] == 'onnxruntime')


def _append(root, rel: str) -> None:
    with open(os.path.join(root, rel), 'ab') as f:
        f.write(b'\0')


def _append_to_program(root) -> None:
    """The ONNX group's model file, one byte longer: a program that differs while its nodes,
    weights, plan and tools do not."""
    with open(os.path.join(root, 'plan.json')) as f:
        _append(root, _onnx_group(json.load(f))['build']['onnx'])


# each: (edit of a copy of the artifact, the cause expected, what it must name)
EDITS = {
    'group_reason': (lambda r: _edit_json(r, 'plan.json', lambda p: _onnx_group(p).update(
        reason='edited')), 'plan_changed', 'reason'),
    'group_build_key': (lambda r: _edit_json(r, 'plan.json', lambda p: _onnx_group(p)[
        'build'].update(disabled_optimizers=['MatMulAddFusion'])), 'plan_changed',
        'disabled_optimizers'),
    'coverage': (lambda r: _edit_json(r, 'plan.json', lambda p: p['coverage'].update(
        fallbacks=['vision'])), 'plan_changed', 'coverage'),
    'buffer_lifetime': (lambda r: _edit_json(r, 'memory.json', lambda m: m['arenas'][0][
        'buffers'][0].update(last_use=m['arenas'][0]['buffers'][0]['last_use'] + 1)),
        'memory', 'last_use'),
    'node_call_site': (lambda r: _edit_json(r, 'graph.json', lambda g: g['nodes'][0][
        'meta'].update(call_site='elsewhere.py:1')), 'graph', 'meta.call_site'),
    'resource': (lambda r: _append(r, 'resources/tokenizer.model'), 'other_files',
                 'resources/tokenizer.model'),
    'group_program': (_append_to_program, 'other_files', 'model.onnx'),
}


@pytest.mark.parametrize('edit', sorted(EDITS) + ['name', 'tools'])
def test_every_difference_of_the_id_is_named(tiny_artifact, tmp_path, capsys, edit):
    edited = str(tmp_path / 'edited')
    shutil.copytree(tiny_artifact, edited)
    m = read_manifest(edited)
    name, tools = m['name'], m['created_by']
    if edit == 'name':
        name, cause, named = name + '_renamed', 'manifest', 'name'
    elif edit == 'tools':
        tools, cause, named = {**tools, 'onnxruntime': '0.0.1'}, 'created_by', 'onnxruntime'
    else:
        change, cause, named = EDITS[edit]
        change(edited)
    write_manifest(edited, m['target'], m['abi'], tools, name)
    report = diff_artifacts(tiny_artifact, edited)
    assert not report['identical']
    assert report['changed'] == [cause], report['changed']
    assert named in json.dumps(report[cause])
    assert main(['diff', tiny_artifact, edited, '--fail-on-change']) == 1
    text = capsys.readouterr().out
    assert f'causes changed: {cause}' in text and named in text
