"""Graph passes on pi05_tiny: each alone and all together keep the stages' outputs, report what
they changed, leave the caller's modules alone; one compile of the optimised spec."""

import copy
import json
import os

import pytest
import torch
import yaml

from lamp_ros.compiler.build import compile_spec
from lamp_ros.compiler.rewrites import enabled_passes, Rewrites, rewrites_for, run_passes
from lamp_ros.policies.pi05.passes import APPROXIMATE, PASS_NAMES, PASSES
from lamp_ros.policies.pi05.rewrites import REWRITES
from lamp_ros.policies.pi05.staged.lower import lower
from lamp_ros.compiler.record_passes import stage_modules
from lamp_ros.spec import load_spec, parse_spec, SpecError
from lamp_ros.graph.graph import Graph
from lamp_ros.trace.from_spec import build_pipeline, trace_pipeline
from lamp_ros.spec import spec_data

SPEC = 'config/specs/pi05_tiny_random.yaml'  # the exact passes on (the `no_passes` variant: off)
ATOL = 1e-5
EXACT = tuple(n for n in PASS_NAMES if n not in APPROXIMATE)  # outputs kept to rounding
FP8_REL = 5e-2  # fp8_prefix_mlp: relative L2 error of a stage output (measured ~2.5e-2)

# What each pass must report on pi05_tiny (a subset of its details), per node it changes.
EXPECTED = {
    'fold_norm_affine': {'vision': {'layer_norms': 5, 'linears': 9},
                         'prefix': {'rms_norms': 4, 'linears': 10}},
    'merge_projections': {'vision': {'qkv': 2, 'linears_removed': 4},
                          'prefix': {'qkv': 2, 'gate_up': 2, 'linears_removed': 6},
                          'denoise': {'qkv': 2, 'gate_up': 2, 'linears_removed': 6}},
    'precompute_time_conditioning': {'denoise': {'steps': 10, 'norms': 5}},
    'remove_unread_work': {'prefix': {'final_norm': 1, 'kv_only_layers': [1]}},
    'fold_euler_update': {'denoise': {'dt': -0.1, 'steps': 10}},
    'fold_constants': {'prefix': {'rope_positions': [-1, 287]},
                       'denoise': {'rope_positions': [0, 337], 'time_embedding_steps': 10}},
    'patch_embed_as_gemm': {'vision': {'patch_embed': 'conv -> gemm', 'gemm': [2352, 64],
                                       'patches': 64}},
    'fuse_attention': {'prefix': {'attention_layers': 2}, 'denoise': {'attention_layers': 2}},
    'fp8_prefix_mlp': {'prefix': {'mlp_layers': 2, 'linears': 6, 'parameters_fp8': 196608}},
}


@pytest.fixture(scope='module')
def stages():
    """(graph, eager modules by node id, example values of one traced tick)."""
    pipeline = build_pipeline(load_spec(SPEC))
    values = {}
    graph = trace_pipeline(pipeline, pipeline.policy.example_observation(),
                           export=False, values_out=values)
    return graph, stage_modules(graph, pipeline.policy), values


def _run(module, node, values) -> tuple:
    args = [v if isinstance(v, torch.Tensor) else torch.as_tensor(v)
            for v in (values[name] for name in node.inputs)]
    with torch.no_grad():
        out = module(*args)
    return out if isinstance(out, tuple) else (out,)


def _rel_l2(got, want) -> float:
    return float((got.float() - want.float()).norm() / want.float().norm())


def _assert_same_outputs(graph, modules, optimised, values, atol=ATOL, rel_l2=None):
    """Every stage output as before: to `atol` elementwise, or (an approximate pass) to
    `rel_l2` relative L2 error, integers and masks exactly."""
    for node_id, module in optimised.items():
        node = graph.node(node_id)
        for name, got, want in zip(node.outputs, _run(module, node, values),
                                   _run(modules[node_id], node, values)):
            assert got.shape == want.shape and got.dtype == want.dtype, name
            if rel_l2 is None or not want.is_floating_point():
                torch.testing.assert_close(got, want, atol=atol, rtol=0, msg=name)
            else:
                assert _rel_l2(got, want) <= rel_l2, (name, _rel_l2(got, want))


def _snapshot(modules) -> dict:
    return {n: {k: v.clone() for k, v in m.state_dict().items()} for n, m in modules.items()}


def _linears(module) -> int:
    return sum(isinstance(m, torch.nn.Linear) for m in module.modules())


def _params(module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_lowering_alone_changes_no_bit(stages):
    graph, modules, values = stages
    lowered = {n: lower(copy.deepcopy(m)) for n, m in modules.items()}
    _assert_same_outputs(graph, modules, lowered, values, atol=0.0)


@pytest.mark.parametrize('name', PASS_NAMES)
def test_each_pass_alone_keeps_outputs_and_reports(stages, name):
    graph, modules, values = stages
    before = _snapshot(modules)
    optimised, results = run_passes(REWRITES, modules, {name: True})
    result = results[name]
    assert list(results) == [name] and result.changed
    assert set(result.details) == set(EXPECTED[name])
    for node_id, expected in EXPECTED[name].items():
        assert expected.items() <= result.details[node_id].items(), result.details[node_id]
    json.dumps(result.details, allow_nan=False)
    for node_id, module in optimised.items():  # unchanged stages are handed on as they were
        assert (module is modules[node_id]) == (node_id not in result.details)
    _assert_same_outputs(graph, modules, optimised, values,
                         rel_l2=FP8_REL if name in APPROXIMATE else None)
    after = _snapshot(modules)
    for node_id in before:  # the caller's modules are untouched
        assert before[node_id].keys() == after[node_id].keys()
        for key, tensor in before[node_id].items():
            assert torch.equal(tensor, after[node_id][key]), f'{node_id}.{key}'


def _chained_actions(graph, optimised, values):
    """The actions when each optimised stage reads the previous optimised stage's outputs."""
    chained = dict(values)
    for node_id in ('vision', 'prefix', 'denoise'):
        node = graph.node(node_id)
        chained.update(zip(node.outputs, _run(optimised[node_id], node, chained)))
    return chained['denoise.actions']


def test_all_exact_passes_keep_the_model_path(stages):
    graph, modules, values = stages
    optimised, results = run_passes(REWRITES, modules, {name: True for name in EXACT})
    assert list(results) == list(EXACT) and all(r.changed for r in results.values())
    _assert_same_outputs(graph, modules, optimised, values)
    torch.testing.assert_close(_chained_actions(graph, optimised, values),
                               values['denoise.actions'], atol=ATOL, rtol=0)
    # a second run changes nothing more
    _, again = run_passes(REWRITES, optimised, {name: True for name in EXACT})
    assert not any(r.changed for r in again.values())


def test_fp8_after_every_other_pass_stays_close(stages):
    """FP8 prefix MLPs on the folded, merged, pruned prefix: one merged gate/up and one down
    per remaining MLP layer, the actions within 1% (measured 0.1%), idempotent."""
    graph, modules, values = stages
    optimised, results = run_passes(REWRITES, modules, {name: True for name in PASS_NAMES})
    assert list(results) == list(PASS_NAMES) and all(r.changed for r in results.values())
    details = results['fp8_prefix_mlp'].details['prefix']
    assert details['mlp_layers'] == 1 and details['linears'] == 2  # the last layer is K/V only
    assert 0 < details['weight_rel_error_max'] < 0.04  # e4m3: 4 significant bits
    # the GPU sums gate/up in cuBLASLt's fast mode, down with float32 promotion (module doc)
    assert details['gpu_accumulation'] == {'gate_up': 'fast', 'down': 'float32'}
    mlp = optimised['prefix'].layers[0].mlp
    assert [getattr(mlp.in_proj, attr).fast_accumulation
            for attr, _, _ in mlp.in_proj.parts] == [True]
    assert mlp.down_proj.fast_accumulation is False
    assert _rel_l2(_chained_actions(graph, optimised, values), values['denoise.actions']) < 1e-2
    _, again = run_passes(REWRITES, optimised, {name: True for name in PASS_NAMES})
    assert not any(r.changed for r in again.values())


def test_passes_remove_linears_and_parameters(stages):
    _, modules, _ = stages
    merged, _ = run_passes(REWRITES, modules, {'merge_projections': True})
    for node_id, drop in (('vision', 4), ('prefix', 6), ('denoise', 6)):
        assert _linears(merged[node_id]) == _linears(modules[node_id]) - drop, node_id
        assert _params(merged[node_id]) == _params(modules[node_id]), node_id
    timed, _ = run_passes(REWRITES, modules, {'precompute_time_conditioning': True})
    expert = modules['denoise']
    time_params = sum(_params(m) for m in (expert.time_mlp_in, expert.time_mlp_out))
    time_params += sum(_params(n.modulation) for n in expert.modules() if hasattr(n, 'modulation'))
    assert _params(timed['denoise']) == _params(expert) - time_params
    assert _linears(timed['denoise']) == _linears(expert) - 7  # time MLP + 5 modulations
    pruned, results = run_passes(REWRITES, modules, {'remove_unread_work': True})
    removed = results['remove_unread_work'].details['prefix']['parameters_removed']
    assert removed > 0
    assert _params(pruned['prefix']) == _params(modules['prefix']) - removed
    assert 'final_norm.weight' not in pruned['prefix'].state_dict()


def test_pass_names_and_order():
    assert [p.__name__ for p in PASSES] == list(PASS_NAMES) == [
        'fold_norm_affine', 'merge_projections', 'precompute_time_conditioning',
        'remove_unread_work', 'fold_euler_update', 'fold_constants', 'patch_embed_as_gemm',
        'fuse_attention', 'fp8_prefix_mlp']
    assert APPROXIMATE == ('fp8_prefix_mlp',)
    assert enabled_passes(REWRITES, {'fold_constants': True, 'fold_norm_affine': True,
                                     'merge_projections': False}) == ('fold_norm_affine',
                                                                      'fold_constants')
    with pytest.raises(ValueError, match='fold_everything'):
        enabled_passes(REWRITES, {'fold_everything': True})


def test_spec_passes_are_booleans_the_policy_names():
    """The spec checks that `passes:` maps names to booleans; which names exist is what the
    policy registered with the compiler (compiler/rewrites.py), checked once the build has the
    policy: pi0.5's through its package, nothing for a policy that registered none."""
    assert load_spec(SPEC).passes == {name: True for name in EXACT}
    raw = spec_data(SPEC)
    assert parse_spec({k: v for k, v in raw.items() if k != 'passes'}).passes == {}  # off
    raw['passes']['fold_constants'] = 'yes'
    with pytest.raises(SpecError, match='passes.fold_constants: expected true or false'):
        parse_spec(raw)
    policy = build_pipeline(load_spec(SPEC)).policy
    assert rewrites_for(policy) is REWRITES
    with pytest.raises(ValueError, match=r"passes: unknown \['fold_everything'\]; known: "
                                         'fold_norm_affine, merge_projections'):
        enabled_passes(rewrites_for(policy), {'fold_everything': True})
    assert rewrites_for(object()) == Rewrites()
    with pytest.raises(ValueError, match='the policy registers none'):
        enabled_passes(rewrites_for(object()), {'fold_constants': True})


# ---- the compiled pi05_tiny (its spec switches the exact passes on) -------------------------

def _json(root, rel):
    with open(os.path.join(root, rel)) as f:
        return json.load(f)


def test_optimised_artifact_passes_parity_and_records_the_passes(tiny_artifact, tiny_graph):
    root = tiny_artifact
    parity = _json(root, 'evidence/parity.json')
    assert parity['passed']
    assert parity['tolerance'] == {'atol': 1e-4, 'rtol': 1e-3}
    assert parity['worst']['denoise.actions']['max_abs'] <= 1e-4
    assert _json(root, 'plan.json')['passes'] == list(EXACT)
    graph = Graph.from_json(open(os.path.join(root, 'graph.json')).read())
    base, opt = tiny_graph.hashes(), graph.hashes()
    for node in graph.nodes:
        if node.kind != 'model':
            assert opt[node.id] == base[node.id], node.id
            assert 'passes' not in node.meta
            continue
        assert opt[node.id] != base[node.id], node.id
        names = [p['name'] for p in node.meta['passes']]
        assert names == node.attrs['passes'] and names == [
            n for n in EXACT if node.id in EXPECTED[n]]
        # the subgraph is exported from the optimised module: no RoPE or time sin/cos left
        if node.id in ('prefix', 'denoise'):
            ops = node.meta['op_counts']
            assert 'aten.sin.default' not in ops and 'aten.cos.default' not in ops, ops
    from safetensors import safe_open
    with safe_open(os.path.join(root, 'weights', 'prefix.safetensors'), 'pt') as f:
        keys = set(f.keys())
    assert 'final_norm.weight' not in keys and 'rotary.cos' in keys
    assert set(graph.node('prefix').weights) == keys


def test_lamp_diff_shows_the_passes(tiny_artifact, tiny_variant):
    from lamp_ros.whitebox.diff import diff_artifacts
    report = diff_artifacts(tiny_variant('no_passes'), tiny_artifact)
    changed = report['nodes_changed']
    assert set(changed) == {'vision', 'prefix', 'denoise'}
    for node_id in changed:
        passes = changed[node_id]['attrs']['passes']
        assert passes[0] is None and passes[1] == [n for n in EXACT
                                                   if node_id in EXPECTED[n]]
    assert report['weights_changed']  # folded / merged / precomputed tensors


@pytest.fixture(scope='session')
def fp8_artifact(tmp_path_factory):
    """pi05_tiny with fp8_prefix_mlp on as well, at the tolerance its spec would state."""
    raw = spec_data(SPEC)
    raw['name'] = 'pi05_tiny_fp8'
    raw['passes']['fp8_prefix_mlp'] = True
    raw['parity'] = {**raw['parity'], 'atol': 2e-2, 'rtol': 2e-2}
    raw['fusion']['text_lengths'] = []  # one ONNX export instead of three: the test is the pass
    root = tmp_path_factory.mktemp('fp8')
    spec = root / 'pi05_tiny_fp8.yaml'
    spec.write_text(yaml.safe_dump(raw))
    result = compile_spec(str(spec), str(root / 'artifact'))
    return result, str(root / 'artifact')


def test_fp8_artifact_parity_and_lamp_diff(fp8_artifact, tiny_artifact):
    """The CPU artifact runs the FP8 numbers in ONNX Runtime (float32 e4m3 values: no float8
    type needed), passes its parity, and `lamp diff` against the exact-pass artifact shows the
    pass on the prefix alone, with its quantised weights."""
    from lamp_ros.whitebox.diff import diff_artifacts
    result, root = fp8_artifact
    assert result.parity_passed
    worst = _json(root, 'evidence/parity.json')['worst']['denoise.actions']
    assert 0 < worst['max_abs'] <= 2e-2  # measured ~6e-3: approximate, and inside the bound
    assert _json(root, 'plan.json')['passes'] == list(PASS_NAMES)
    report = diff_artifacts(tiny_artifact, root)
    changed = report['nodes_changed']
    assert set(changed) == {'prefix'}
    assert changed['prefix']['attrs']['passes'] == [
        [n for n in EXACT if 'prefix' in EXPECTED[n]],
        [n for n in PASS_NAMES if 'prefix' in EXPECTED[n]]]
    weights = {w['tensor']: w.get('change') for w in report['weights_changed']}
    assert {w['node'] for w in report['weights_changed']} == {'prefix'}
    assert weights['layers.0.mlp.down_proj.codes'] == 'added'
    assert weights['layers.0.mlp.down_proj.weight'] == 'removed'


def test_patch_linear_is_the_convolution_at_the_full_patch_size():
    """14 x 14 x 3 patches (588 values, padded with zeros to 592 for aligned GEMM rows): the
    GEMM over unfolded channels-last pixels is the Conv2d on NCHW plus the position table."""
    from lamp_ros.policies.pi05.staged.patch_linear import PatchLinear
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 16, 14, stride=14)
    pos = torch.randn(9, 16)
    pixels = torch.randn(2, 42, 42, 3)
    patch = PatchLinear.from_conv(conv, pos)
    assert patch.weight.shape == (16, 592) and not patch.weight[:, 588:].any()
    want = conv(pixels.permute(0, 3, 1, 2)).flatten(2).transpose(1, 2) + pos
    torch.testing.assert_close(patch(pixels), want, atol=1e-5, rtol=0)
    for bad in (torch.nn.Conv2d(3, 16, 14, stride=7), torch.nn.Conv2d(3, 16, 14, stride=14,
                                                                      padding=1)):
        with pytest.raises(ValueError, match='not a patch embedding'):
            PatchLinear.from_conv(bad, pos)
    with pytest.raises(ValueError, match='do not tile a square'):
        PatchLinear.from_conv(conv, torch.randn(8, 16))
