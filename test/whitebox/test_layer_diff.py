"""`lamp diff A B --layers` (whitebox/layer_diff.py) on real artifacts: the demo policy's build
and a copy of it with one layer deliberately lowered to int8 by the precision plan's own
lowering (backends/onnx_int8.py), the two run through their Runtimes and ONNX Runtime."""

import json
import os

import pytest
from conftest import calibrated_int8_lowering

from lamp_ros.artifact.load import open_artifact
from lamp_ros.artifact.manifest import read_manifest, write_manifest
from lamp_ros.cli import main
from lamp_ros.whitebox import layer_diff as layer_diff_module
from lamp_ros.whitebox.layer_diff import format_layers, layer_diff, LayerDiffError

LOWERED = 'prefix.layers.0.mlp.down_proj'


@pytest.fixture(scope='module')
def one_layer_int8(demo_artifact, tmp_path_factory):
    """A copy of the demo artifact with LOWERED alone in int8: a valid artifact (its own plan
    and manifest) of the same graph."""
    root, lowering = calibrated_int8_lowering(demo_artifact, tmp_path_factory, 3)
    artifact = open_artifact(root)
    group = lowering.group
    build = lowering.lower([LOWERED], 'model.int8')
    plan = artifact.plan.to_dict()
    for entry in plan['groups']:
        if entry['name'] == group.name:
            entry['build'] = build
    with open(os.path.join(root, 'plan.json'), 'w') as f:
        json.dump(plan, f)
    os.remove(os.path.join(root, group.build['onnx']))
    m = read_manifest(root)
    write_manifest(root, m['target'], m['abi'], m['created_by'], m['name'] + '_one_int8')
    return root


def test_the_deliberately_lowered_layer_is_named_first(demo_artifact, one_layer_int8,
                                                       tmp_path, capsys, monkeypatch):
    reports = []  # the report the command printed (one run of both artifacts, not two)

    def kept(*args, **kwargs):
        reports.append(layer_diff(*args, **kwargs))
        return reports[-1]

    monkeypatch.setattr(layer_diff_module, 'layer_diff', kept)
    png = tmp_path / 'pictures' / 'layers.png'  # its folder is made
    assert main(['diff', demo_artifact, one_layer_int8, '--layers', '--samples', '3',
                 '--png', str(png)]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[3].split()[0] == LOWERED  # the table's first row
    assert png.stat().st_size > 10_000 and f'wrote {png}' in text
    (report,) = reports
    assert report['observations'] == 3
    (group,) = report['groups'].values()
    first = group['first_divergent']  # the header names it, and so does a row
    assert f'first layer past max rel 0.01: {first or "none"}' in text
    assert first is None or first in [line.split()[0] for line in text.splitlines()[3:]]
    assert group['by_added_error'][0] == LOWERED
    rows = group['layers']
    assert rows[LOWERED]['added']['max_rel'] > 1e-3
    # every other layer computes as A's does: it adds nothing, whatever it receives
    assert all(r['added']['max_rel'] < 1e-6 for n, r in rows.items() if n != LOWERED)
    # nothing before it differs; the first layer past the threshold is it or after it
    order = rows[LOWERED]['order']
    assert all(r['output']['max_rel'] == 0 for r in rows.values() if r['order'] < order)
    first = group['first_divergent']
    assert first is None or rows[first]['order'] >= order
    assert 0 < report['actions']['max_rel'] < 0.1


def test_the_same_artifact_twice_adds_no_error(demo_artifact):
    report = layer_diff(demo_artifact, demo_artifact, samples=2)
    (group,) = report['groups'].values()
    assert group['first_divergent'] is None and report['actions']['max_rel'] == 0
    assert all(r['added']['max_rel'] == 0 for r in group['layers'].values())


def test_artifacts_of_different_graphs_are_refused(demo_artifact, act_small_artifact):
    with pytest.raises(LayerDiffError, match='not of one graph'):
        layer_diff(demo_artifact, act_small_artifact)


def _row(order: int, added: float, output: float) -> dict:
    return {'order': order, 'added': {'max_rel': added, 'cosine': 1.0},
            'output': {'max_rel': output, 'cosine': 1.0}}


def test_the_first_divergent_layer_is_printed_wherever_it_ranks():
    """A layer that adds little but is the first whose output passes the threshold (it
    carries the error of the layers before it) ranks below the table's top: its row is
    printed all the same, after a `...` line, and marked."""
    layers = {f'layer{i}': _row(i, 1e-2 / (i + 1), 0.0) for i in range(20)}
    layers['late'] = _row(20, 1e-9, 0.5)
    group = {'layers': layers, 'not_found': [], 'first_divergent': 'late',
             'by_added_error': sorted(layers, key=lambda n: -layers[n]['added']['max_rel'])}
    report = {'a': 'a' * 64, 'b': 'b' * 64, 'observations': 2, 'threshold': 1e-2,
              'actions': {'max_rel': 0.1, 'cosine': 0.99}, 'groups': {'g03_onnxruntime': group}}
    lines = format_layers(report, top=15).splitlines()
    assert lines[1].endswith('first layer past max rel 0.01: late')
    assert [line.split()[0] for line in lines[3:18]] == group['by_added_error'][:15]
    assert lines[18] == '  ... (5 layers between)'
    assert lines[19].split()[0] == 'late' and lines[19].endswith('<- first past the threshold')
    group['first_divergent'] = 'layer1'  # in the top: marked where it stands
    lines = format_layers(report, top=15).splitlines()
    assert len(lines) == 18 and lines[4].endswith('<- first past the threshold')
