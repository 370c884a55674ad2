"""The committed GPU precision record (bench/results/precision_gpu_h200/, made by
scripts/device/precision_gpu.sh on an H200) holds together: the table's plans are the ones
whose evidence is beside it, each within its budget, and what docs/precision.md says of them
is what they hold."""

import json
import os

import pytest

HERE = 'bench/results/precision_gpu_h200'


def _json(name):
    with open(os.path.join(HERE, name), encoding='utf-8') as f:
        return json.load(f)


@pytest.fixture(scope='module')
def table():
    return _json('precision_gpu.json')


def test_one_card_four_builds(table):
    assert 'H200' in table['gpu'] and table['runs'] == 200
    assert set(table['artifacts']) == {'bf16', 'hand', 'auto', 'loose'}
    for a in table['artifacts'].values():
        assert a['gpu_p50_ms'] <= a['gpu_p99_ms'] and a['inference_p50_ms'] >= a['gpu_p50_ms']
        assert -1.0 <= a['cosine'] <= 1.0 and a['max_rel'] >= 0
    t = table['artifacts']
    assert t['hand']['gpu_p50_ms'] < t['bf16']['gpu_p50_ms']


@pytest.mark.parametrize('name', ['auto', 'loose'])
def test_each_plan_is_within_its_budget_and_its_evidence_is_the_tables(table, name):
    evidence = _json(f'{name}_precision.json')
    (group,) = evidence['groups'].values()
    budget = evidence['budget']
    combined = group['combined']
    assert combined['within_budget'] and combined['cosine'] >= budget['cosine'] \
        and combined['max_rel'] <= budget['max_rel']
    summary = table['artifacts'][name]['plan']
    assert summary['budget'] == budget
    (planned,) = summary['groups'].values()
    assert planned['chosen'] == len(group['chosen']) and planned['combined'] == combined
    layers = group['layers']
    for linear in group['chosen']:
        row = layers[linear]
        assert row['eligible'] and row['saved_ms'] > 0
        assert row['cosine'] >= budget['cosine'] and row['max_rel'] <= budget['max_rel']
    # what docs/precision.md reports: the expert refused, the vision slower in FP8
    assert all('cosine' not in r for n, r in layers.items() if n.startswith('denoise.'))
    assert all(r['low_ms'] >= r['high_ms'] for n, r in layers.items()
               if n.startswith('vision.'))
    assert all(n.startswith('prefix.') for n in group['chosen'])
