"""The precision plan of a cuda group, made on its stage modules before it is built
(compiler/precision_modules.py, backends/cuda/fp8_variants.py), on the CPU: the tiny cuda spec's
real pipeline, passes and device letterbox, a provisional artifact whose host groups are built
by the real compiler and run by the real Runtime, the group's eager variants with real
Fp8Linears (on the CPU their float32 form: the same e4m3 numbers, torch._scaled_mm being
CUDA's).

What cannot exist here is the GPU's timing of each GEMM in bf16 and in FP8: `fake_gpu_timer`
stands in for it (a mock, said so), and the GPU run (scripts/device/precision_gpu.sh) measures
the real one."""

import copy
import dataclasses
import re

import numpy as np
import pytest
import torch

from lamp_ros.backends.group_module import group_module
from lamp_ros.compiler.build import plan_module_precision
from lamp_ros.compiler.device_letterbox import letterbox_on_device
from lamp_ros.compiler.partition import assign, partition
from lamp_ros.compiler.precision_plan import error_units
from lamp_ros.compiler.record_passes import stage_modules
from lamp_ros.compiler.rewrites import rewrites_for, run_passes
from lamp_ros.kernels.linears import Fp8Linear
from lamp_ros.spec import load_spec
from lamp_ros.spec.precision import Budget, Calibration, PrecisionPlan
from lamp_ros.trace.from_spec import build_pipeline, trace_pipeline

CUDA_SPEC = 'config/specs/pi05_tiny_cuda.yaml'


def fake_gpu_timer(variants, name, rows):
    """A mock of the GPU's timings (none exist on this machine): a GEMM's bf16 time grows with
    its multiply-adds and FP8 halves it, except for the vision's q/k/v, which it makes slower
    (so that the plan's "saves too little" branch runs)."""
    node, path = variants.linears[name]
    linear = variants.stages[node].get_submodule(path)
    if not isinstance(linear, torch.nn.Linear):
        linear = variants.lowered[name]
    high = 1e-3 + rows * linear.in_features * linear.out_features * 1e-12
    return (high, high * 1.5) if 'attn_in' in name else (high, high * 0.5)


@pytest.fixture(scope='module')
def prepared():
    """(spec, pipeline, graph, modules, pass results, example values, rewrites) as
    compile_spec has them when it plans (the tiny cuda spec, planned); `_plan` copies what a
    plan changes, so the tests share one preparation."""
    spec = load_spec(CUDA_SPEC)
    spec = type(spec)(**{**spec.__dict__, 'precision': PrecisionPlan(
        'auto', Budget(), Calibration('parity', '', 2))})
    pipeline = build_pipeline(spec, device='cpu')
    example = {}
    graph = trace_pipeline(pipeline, pipeline.example_observation(), export=False,
                           values_out=example, hash_weights=False)
    rewrites = rewrites_for(pipeline.policy)
    modules, results = run_passes(rewrites, stage_modules(graph, pipeline.policy), spec.passes)
    graph, modules = letterbox_on_device(graph, modules, spec.fusion['device_letterbox'],
                                         example, rewrites.letterbox_stage)
    return spec, pipeline, graph, modules, results, example, rewrites


def _plan(prepared, budget: Budget, folder, say=lambda message: None) -> tuple:
    """plan_module_precision at `budget` on a copy of the prepared modules -> (spec, the
    modules it changed, its results, records, evidence)."""
    spec, pipeline, graph, modules, results, example, rewrites = prepared
    spec = type(spec)(**{**spec.__dict__, 'precision': dataclasses.replace(
        spec.precision, budget=budget)})
    modules = copy.deepcopy(modules)
    results, records, evidence = plan_module_precision(
        spec, pipeline, graph, modules, dict(results), example, rewrites, str(folder), 'cpu',
        say, timer=fake_gpu_timer)
    return spec, modules, results, records, evidence


@pytest.fixture(scope='module')
def planned(prepared, tmp_path_factory):
    _, _, graph, modules, _, example, _ = prepared
    said = []
    spec, planned_modules, results, records, evidence = _plan(
        prepared, Budget(cosine=0.999, max_rel=2e-2), tmp_path_factory.mktemp('plan'),
        said.append)
    (group,) = [g for g in partition(graph, spec, assign(graph, spec)) if g.backend == 'cuda']
    args = [torch.as_tensor(np.asarray(example[v])) for v in group.inputs]
    return dict(spec=spec, graph=graph, group=group, args=args, before=modules,
                modules=planned_modules, results=results, records=records, evidence=evidence,
                said=said, example=example)


def test_the_plan_stays_within_its_budget_and_says_why_for_every_linear(planned):
    spec, modules, evidence = planned['spec'], planned['modules'], planned['evidence']
    (name, record), = planned['records'].items()
    group = evidence[name]
    layers, table = record['layers'], group['layers']
    assert set(layers) == set(table) and record['lowered_to'] == 'fp8'
    chosen = set(group['chosen'])
    assert chosen and group['combined']['within_budget']
    assert group['combined']['cosine'] >= 0.999 and group['combined']['max_rel'] <= 2e-2
    for linear, row in table.items():
        why = layers[linear]['why']
        # plan.json is part of the artifact id: no timing in its words (evidence has them)
        assert not re.search(r'\d\.\d+ ?(us|ms)\b', why), why
        assert layers[linear]['precision'] == ('fp8' if linear in chosen else 'fp32'), linear
        if linear.startswith('denoise.'):  # pi0.5's expert: refused by its lowering
            assert 'action expert' in why and 'cosine' not in row
        elif '.attn_in.' in linear:  # slower in FP8 (the mock's timings)
            assert why.startswith('saves too little on the build GPU') and 'cosine' not in row
        else:
            assert row['eligible'] and row['saved_ms'] > 0 and 'cosine' in row
            assert linear in chosen or 'exceeds' in why or 'backed off' in why \
                or 'not needed' in why
    # ranked by time saved per unit of error: the chosen are the eligible ones ranked first
    budget = spec.precision.budget
    fitted = [n for n, r in table.items() if r['eligible'] and budget.allows(r['cosine'],
                                                                             r['max_rel'])]
    rank = sorted(fitted, key=lambda n: (-table[n]['saved_ms']
                                         / max(error_units(table[n], budget), 1e-9), n))
    assert group['chosen'] == rank[:len(group['chosen'])]
    assert any('measuring each alone' in s for s in planned['said'])
    # the compiler's modules now hold exactly the chosen linears as Fp8Linears
    swapped = {f'{node}.{path}' for node, stage in modules.items()
               for path, m in stage.named_modules() if isinstance(m, Fp8Linear)}
    assert swapped == chosen
    details = planned['results']['precision_plan'].details
    assert sum(d['fp8_linears'] for d in details.values()) == len(chosen)


def test_the_built_linears_are_the_ones_measured(planned):
    """The group the build gets (the compiler's modules, with the plan's Fp8Linears) computes
    what the plan's last verification ran: the same codes, quantised from the same weights."""
    from lamp_ros.backends.cuda.fp8_variants import Fp8Variants
    graph, group, args = planned['graph'], planned['group'], planned['args']
    (entry,) = planned['evidence'].values()
    variants = Fp8Variants(graph, group, planned['before'], planned['example'], 'cpu')
    variants.lower(entry['chosen'])
    with torch.no_grad():
        measured = variants.module(*args)
        built = group_module(graph, group, planned['modules'])(*args)
    for a, b in zip(measured, built):
        torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_fp8_linears_anywhere_in_the_prefix_and_vision_run_on_the_kernel_path(planned):
    """The cuda lowering (on the CPU, its kernels' CPU code) takes an FP8 linear wherever a
    plan may put one: an o_proj whose residual the GEMM epilogue would add, a vision fc1 whose
    GELU the epilogue would apply; the same outputs as the eager stages."""
    from lamp_ros.policies.pi05.cuda.lowering import use_kernels
    graph, group, args = planned['graph'], planned['group'], planned['args']
    stages = {n: copy.deepcopy(planned['before'][n]) for n in group.nodes}
    for node, path in (('prefix', 'layers.0.attn.o_proj'), ('vision', 'blocks.0.fc1'),
                       ('vision', 'blocks.1.out_proj'), ('prefix', 'layers.0.mlp.down_proj')):
        parent, _, attr = path.rpartition('.')
        owner = stages[node].get_submodule(parent)
        setattr(owner, attr, Fp8Linear.from_linear(getattr(owner, attr)))
    switched = {n: copy.deepcopy(m) for n, m in stages.items()}
    assert use_kernels(switched)
    with torch.no_grad():
        eager = group_module(graph, group, stages)(*args)
        lowered = group_module(graph, group, switched)(*args)
    for a, b in zip(eager, lowered):
        torch.testing.assert_close(a, b, atol=2e-4, rtol=1e-3)


def test_a_budget_nothing_fits_keeps_every_linear_and_says_so(prepared, tmp_path):
    _, modules, results, records, _ = _plan(prepared, Budget(cosine=1.0, max_rel=0.0),
                                            tmp_path)
    (record,) = records.values()
    assert not results['precision_plan'].changed
    assert not any(isinstance(m, Fp8Linear) for stage in modules.values()
                   for m in stage.modules())
    reasons = {d['why'] for d in record['layers'].values()}
    assert 'alone it exceeds the budget' in reasons
    assert all(d['precision'] == 'fp32' for d in record['layers'].values())


def test_the_set_backs_off_linear_by_linear_until_it_fits(prepared, planned, tmp_path):
    """A budget every linear fits alone but their set does not (between the worst single
    error and the whole set's, both measured by the fixture's plan): the plan backs off the
    last-ranked linears one at a time and ends within the budget."""
    (entry,) = planned['evidence'].values()
    singles = max(r['max_rel'] for r in entry['layers'].values() if 'max_rel' in r)
    whole = entry['steps'][0]['max_rel']
    assert whole > singles  # the errors of FP8 linears add up
    budget = Budget(cosine=0.0, max_rel=(singles + whole) / 2)
    _, _, _, records, evidence = _plan(prepared, budget, tmp_path)
    (record,), (group,) = records.values(), evidence.values()
    steps = group['steps']
    assert len(steps) > 1 and not steps[0]['within_budget'] and steps[-1]['within_budget']
    assert steps[-1]['max_rel'] <= budget.max_rel
    backed = [s['backed_off'] for s in steps if 'backed_off' in s]
    assert backed == list(reversed(entry['chosen']))[:len(backed)]  # the last-ranked first
    assert all(record['layers'][n]['why'].startswith('backed off') for n in backed)


def test_the_table_is_drawn_as_time_saved_against_error(planned, tmp_path):
    from lamp_ros.compiler.precision_plan import render_precision
    evidence = {'budget': planned['spec'].precision.budget.to_dict(),
                'groups': planned['evidence']}
    render_precision(evidence, str(tmp_path / 'precision.png'))
    assert (tmp_path / 'precision.png').stat().st_size > 10_000
