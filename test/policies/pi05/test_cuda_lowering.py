"""The kernel lowering on pi05_tiny (CPU): stages switched onto the `lamp::` operators compute
what the passes' stages compute, export with the operators named in the program, and the eager
stages (no pass ran) are left alone. The operators' CPU implementations are the reference the
Triton kernels are checked against (test_triton_kernels.py, and on the GPU)."""

import copy

import pytest
import torch

from lamp_ros.compiler.rewrites import run_passes
from lamp_ros.policies.pi05.passes import PASS_NAMES
from lamp_ros.policies.pi05.rewrites import REWRITES
from lamp_ros.policies.pi05.staged.expert_kernels import ExpertKernels, LIBRARY, PARTS, PREMADE
from lamp_ros.compiler.record_passes import stage_modules
from lamp_ros.spec import BuildOptions, load_spec
from lamp_ros.kernels import tuning
from lamp_ros.policies.pi05.cuda import choices, expert_layers, gemms, lowering
from lamp_ros.policies.pi05.cuda.lowering import bypassed_modules, use_kernels
from lamp_ros.trace.from_spec import build_pipeline, trace_pipeline


@pytest.fixture(scope='module')
def optimised():
    pipeline = build_pipeline(load_spec('config/specs/pi05_tiny_random.yaml'))
    values = {}
    graph = trace_pipeline(pipeline, pipeline.policy.example_observation(),
                           export=False, values_out=values)
    modules = stage_modules(graph, pipeline.policy)
    passed, _ = run_passes(REWRITES, modules, {name: True for name in PASS_NAMES})
    return graph, modules, passed, values


def _args(graph, node_id, values):
    return [v if isinstance(v, torch.Tensor) else torch.as_tensor(v)
            for v in (values[name] for name in graph.node(node_id).inputs)]


def _outputs(module, args):
    with torch.no_grad():
        out = module(*args)
    return out if isinstance(out, tuple) else (out,)


def test_kernels_keep_every_stage_output(optimised):
    graph, _, passed, values = optimised
    switched = copy.deepcopy(passed)
    counts = use_kernels(switched)
    # the expert's two layers in their fused forms (the first candidates off the GPU) call
    # neither their adaRMS norms, GeGLU, attention module nor residual epilogues: only the
    # prefix's and the expert's final norm are counted (bypassed_modules, below)
    assert counts == {'rms_norm': 3, 'layer_norm': 5, 'ada_rms_norm': 1, 'rope': 2, 'geglu': 1,
                      'residual_epilogues': 2, 'attention': 2, 'expert_layer': 2,
                      'flash_attention': 1, 'gelu_epilogue': 2}, counts
    for node_id in ('vision', 'prefix', 'denoise'):
        args = _args(graph, node_id, values)
        for got, want in zip(_outputs(switched[node_id], args), _outputs(passed[node_id], args)):
            torch.testing.assert_close(got, want, atol=2e-5, rtol=0, msg=node_id)
    assert use_kernels(switched) == {}  # a second lowering finds nothing left to switch


def test_the_counts_name_the_expert_modules_each_form_bypasses(optimised):
    """A module switched onto a kernel counts only where it runs: an expert part in its library
    form calls its norm (and GeGLU, attention module), a fused or premade one does not; a
    layer's residual epilogues never run once it has ExpertKernels."""
    _, _, passed, _ = optimised
    switched = {'denoise': copy.deepcopy(passed['denoise'])}
    use_kernels(switched)
    stage = switched['denoise']
    first, second = (layer.expert_kernels for layer in stage.layers)
    assert bypassed_modules(stage) == {'residual_epilogues': 2, 'ada_rms_norm': 4, 'geglu': 2,
                                       'attention': 2}
    first.tiles.update(qkv=LIBRARY, attention=LIBRARY)
    second.tiles['gate_up'] = _premade_tiles(stage.layers[1], 'gate_up')
    assert first.form('gate_up') == 'fused' and second.form('gate_up') == 'premade'
    assert bypassed_modules(stage) == {'residual_epilogues': 2, 'ada_rms_norm': 3, 'geglu': 2,
                                       'attention': 1}


def test_every_timed_form_of_an_expert_part_computes_what_its_library_form_does(optimised):
    """The build times each expert part's candidates on made inputs and refuses those whose
    output strays from the library form's (tuning.pick's reference). So the inputs must let
    every form compute the same numbers: here, on the CPU references (which ignore tiles), each
    candidate's launch agrees with the library's to float32 rounding, the premade forms
    included, whose made input carries each layer's own modulation."""
    _, _, passed, _ = optimised
    stage = copy.deepcopy(passed['denoise'])
    layers = list(stage.layers)
    for layer in layers:
        layer.expert_kernels = ExpertKernels(layer)
    problems = expert_layers._tuning_problems(stage, layers)
    assert set(problems) == set(PARTS)
    with torch.no_grad():
        for part, (_, candidates, launch) in problems.items():
            want = launch(LIBRARY)
            if part in ('qkv', 'gate_up'):
                assert any(len(c) == PREMADE for c in candidates), part
            for tiles in candidates:
                error = tuning.disagreement(launch(tiles), want)
                assert error < 1e-5, (part, tiles, error)


def test_eager_stages_are_left_alone(optimised):
    _, modules, _, _ = optimised
    assert use_kernels(copy.deepcopy(modules)) == {}


def _exported_targets(optimised, node_id) -> set:
    """Operators the exported program of one stage switched onto the kernels calls; the program
    computes what the passes' stage computes."""
    graph, _, passed, values = optimised
    switched = {node_id: copy.deepcopy(passed[node_id])}
    use_kernels(switched)
    args = tuple(_args(graph, node_id, values))
    with torch.no_grad():
        program = torch.export.export(switched[node_id], args, strict=False)
        got, want = program.module()(*args), passed[node_id](*args)
    for a, b in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,)):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=0)
    return {str(n.target) for n in program.graph.nodes if n.op == 'call_function'}


def test_export_names_the_operators(optimised):
    assert {'lamp.rms_norm.default', 'lamp.ada_linear.default', 'lamp.ada_geglu.default',
            'lamp.gated_linear.default', 'lamp.mqa_attention.default'} <= \
        _exported_targets(optimised, 'denoise')


def test_residual_adds_run_in_the_norms(optimised):
    """Where a GEMM cannot take the residual in its epilogue (the vision's biased out_proj and
    fc2, the prefix's FP8 down projection), the add runs in the kernel of the norm that reads
    the sum: the exported programs call `lamp::add_norm`, and no add kernel is left for a
    residual (the vision's one add is its positions, after the patch GEMM; the prefix's are
    the CPU's FP8 rounding reference, which the GPU does in `lamp::fp8_rows`)."""
    graph, _, passed, values = optimised
    for node_id, fused in (('vision', 2 * len(passed['vision'].blocks)), ('prefix', 1)):
        switched = {node_id: copy.deepcopy(passed[node_id])}
        use_kernels(switched)
        with torch.no_grad():
            program = torch.export.export(switched[node_id], tuple(_args(graph, node_id, values)),
                                          strict=False)
        calls = [n for n in program.graph.nodes if n.op == 'call_function']
        assert [str(n.target) for n in calls].count('lamp.add_norm.default') == fused, node_id
        adds = [n.meta.get('stack_trace', '').strip().splitlines()[-1] for n in calls
                if str(n.target) == 'aten.add.Tensor']
        if node_id == 'vision':
            assert len(adds) == 1 and 'self.table' in adds[0], adds  # after the patch GEMM
        else:
            residual = ('pending', 'attend', 'mlp_')
            assert not [x for x in adds if any(w in x for w in residual)], adds
            # the attention output's add runs in the kernel making the MLP's FP8 rows, so the
            # o GEMM has no residual for torch to copy into its output
            assert [str(n.target) for n in calls].count('lamp.add_rms_norm_fp8.default') == 1
            assert not [n for n in calls if str(n.target) == 'aten.addmm.default'
                        and len(n.args[0].meta['val'].shape) == 2], 'a residual addmm is left'


def test_weights_stored_in_out_keep_the_outputs(optimised, monkeypatch):
    """Where the build GPU ran a GEMM faster with its weight stored (in, out), the linear becomes
    a KNLinear: the vision's q/k/v, out_proj and fc2 and the prefix's q/k/v and o here (a tile
    cache that chose that layout for every shape stands in for the GPU's measurement: on the
    CPU the lowering keeps nn.Linear's layout untimed). The stages compute what they did and export
    with the transposed weights as their parameters."""
    graph, _, passed, values = optimised

    class EveryShapeChoseKN(dict):
        def get(self, key, default=None):
            return {'tiles': gemms.KN, 'measured': [str(gemms.NK), str(gemms.KN)]}

    monkeypatch.setattr(choices, 'tile_cache', lambda device: EveryShapeChoseKN())
    switched = {n: copy.deepcopy(passed[n]) for n in ('vision', 'prefix')}
    chosen = {}
    counts = use_kernels(switched, chosen)
    sites = sum(len(gemms._layout_sites(passed[n])[1]) for n in ('vision', 'prefix'))
    # and, once on the kernel path, the o of each prefix layer whose MLP norm adds its residual
    sites += sum(layer.defers_attention_residual for layer in switched['prefix'].layers)
    assert sites >= 3 * len(passed['vision'].blocks) + 1 and counts['kn_weights'] == sites, \
        counts
    layouts = {k: v for k, v in chosen.items() if k.startswith('linear ')}
    assert layouts and all(v['tiles'] == [1] and v['source'] == 'tile cache'
                           for v in layouts.values()), layouts
    for node_id in ('vision', 'prefix'):
        args = tuple(_args(graph, node_id, values))
        with torch.no_grad():
            program = torch.export.export(switched[node_id], args, strict=False)
            for got, want in zip(_outputs(program.module(), args),
                                 _outputs(passed[node_id], args)):
                torch.testing.assert_close(got, want, atol=2e-5, rtol=0, msg=node_id)
        assert sum(name.endswith('weight_t') for name in program.state_dict) > 0


def test_a_warm_tile_cache_changes_the_evidence_not_the_choices(optimised, monkeypatch):
    """One spec, one artifact id: a build that chose every tiling itself (cold: here the first
    candidate, as off the GPU) and a rebuild that takes the same choices from the tile cache
    the first one left differ in where each choice came from, and in nothing the plan keeps
    (tuning.split_record: the choices to plan.json, the rest to evidence/build.json)."""
    _, _, passed, _ = optimised
    cold, warm = {}, {}
    use_kernels(copy.deepcopy(passed), cold)

    class LeftByTheColdBuild(dict):
        def get(self, key, default=None):
            return {'tiles': cold[key]['tiles']} if key in cold else default

    pick = tuning.pick

    def pick_with_every_candidate_timed(candidates, launch, on_gpu, cached=None, **kwargs):
        if cached is not None:  # the cold build on a GPU would have timed each of them
            cached = {**cached, 'measured': [str(list(c)) for c in candidates]}
        return pick(candidates, launch, on_gpu, cached, **kwargs)

    monkeypatch.setattr(choices, 'tile_cache', lambda device: LeftByTheColdBuild())
    monkeypatch.setattr(tuning, 'pick', pick_with_every_candidate_timed)
    use_kernels(copy.deepcopy(passed), warm)
    assert cold and set(warm) == set(cold)
    assert {r['source'] for r in cold.values()} == {'first candidate'}
    assert {r['source'] for r in warm.values()} == {'tile cache'}
    cold_choices, cold_how = tuning.split_record(cold)
    warm_choices, warm_how = tuning.split_record(warm)
    assert warm_choices == cold_choices and warm_how != cold_how
    remeasured = {}  # lamp compile --measure-tiles: the cache is not read
    use_kernels(copy.deepcopy(passed), remeasured, measure_tiles=True)
    assert {r['source'] for r in remeasured.values()} == {'first candidate'}


def test_no_gemm_algorithm_is_stored_off_the_gpu(optimised):
    """On the CPU the prefix's and vision's linears stay torch's ops at every prompt length's
    rows: cuBLASLt algorithms are measured on the build GPU or not at all."""
    _, _, passed, _ = optimised
    switched = {n: copy.deepcopy(passed[n]) for n in ('vision', 'prefix')}
    chosen = {}
    counts = use_kernels(switched, chosen, text_lengths=(8, 96))
    assert 'cublaslt_linear' not in counts
    assert not [k for k in chosen if k.startswith('cublaslt')], chosen
    assert not [m for stage in switched.values() for m in stage.modules()
                if type(m).__name__ == 'LtLinear']


def test_prefix_rotates_q_and_k_in_one_launch(optimised):
    """Each prefix layer's q and k go through one `lamp::rope_qk`; the K/V-only layer's k
    through `lamp::rope` (the program computes the passes' stage: _exported_targets checks)."""
    _, _, passed, _ = optimised
    targets = _exported_targets(optimised, 'prefix')
    assert 'lamp.rope_qk.default' in targets
    assert ('lamp.rope.default' in targets) == any(x.kv_only for x in passed['prefix'].layers)


def test_fp8_prefix_exports_its_operator(optimised):
    """The FP8 prefix MLP on the kernel path: the GeGLU's rows made by `lamp::geglu_fp8` (on
    the CPU its reference; the Fp8Linears stay in float32 numbers: torch._scaled_mm is CUDA's)."""
    targets = _exported_targets(optimised, 'prefix')
    assert 'lamp.geglu_fp8.default' in targets and 'lamp.geglu.default' not in targets
    # the MLP's input rows come from its norm's kernel, quantised there (after the attention
    # output's add: test_residual_adds_run_in_the_norms)
    assert 'lamp.add_rms_norm_fp8.default' in targets and 'lamp.fp8_rows.default' not in targets


@pytest.mark.parametrize('form', ['fused', 'library', 'mixed'])
def test_expert_parts_agree_in_either_form(optimised, form):
    """Each expert part runs fused or in its library form, as the build's timing chose: every
    combination computes the passes' stage."""
    graph, _, passed, values = optimised
    switched = {'denoise': copy.deepcopy(passed['denoise'])}
    chosen = {}
    use_kernels(switched, chosen)
    assert sorted(key.split()[0] for key in chosen) == sorted(PARTS)
    assert all(choice['tiles'] != LIBRARY for choice in chosen.values())  # CPU: first fused
    for i, layer in enumerate(switched['denoise'].layers):
        for j, part in enumerate(PARTS):
            if form == 'library' or (form == 'mixed' and (i + j) % 2):
                layer.expert_kernels.tiles[part] = LIBRARY
    args = _args(graph, 'denoise', values)
    torch.testing.assert_close(_outputs(switched['denoise'], args),
                               _outputs(passed['denoise'], args), atol=2e-5, rtol=0)


def _premade_tiles(layer, part):
    """The first premade tiling of `part` at pi05_tiny's expert shapes."""
    w = (layer.attn.in_proj if part == 'qkv' else layer.mlp.in_proj).linears()[0].weight
    n = w.shape[0] // (2 if part == 'gate_up' else 1)
    return tuning.premade_candidates(50, n, w.shape[1], part == 'gate_up', w.element_size())[0]


@pytest.mark.parametrize('gated', ['fused', 'library'])
def test_expert_premade_parts_agree_and_export(optimised, gated):
    """qkv and gate_up in their premade form: the gated GEMM before each (o; the previous
    layer's down) makes x * mod and the pieces of the sums of squares in its epilogue
    (lamp::gated_linear_prep), or lamp::norm_pieces does after a library o / down and before
    the first layer. The stage computes what the passes' stage does, and the exported program
    names the operators."""
    graph, _, passed, values = optimised
    switched = {'denoise': copy.deepcopy(passed['denoise'])}
    use_kernels(switched)
    layers = switched['denoise'].layers
    for layer in layers:
        kern = layer.expert_kernels
        for part in ('qkv', 'gate_up'):
            kern.tiles[part] = _premade_tiles(layer, part)
            assert kern.form(part) == 'premade' and len(kern.tiles[part]) == PREMADE
        if gated == 'library':
            kern.tiles['o'] = kern.tiles['down'] = LIBRARY
    args = tuple(_args(graph, 'denoise', values))
    torch.testing.assert_close(_outputs(switched['denoise'], args),
                               _outputs(passed['denoise'], args), atol=2e-5, rtol=0)
    with torch.no_grad():
        program = torch.export.export(switched['denoise'], args, strict=False)
    torch.testing.assert_close(_outputs(program.module(), args),
                               _outputs(passed['denoise'], args), atol=2e-5, rtol=0)
    calls = [str(n.target) for n in program.graph.nodes if n.op == 'call_function'
             and str(n.target).startswith('lamp.')]
    steps = switched['denoise'].cfg.num_steps
    assert calls.count('lamp.premade_linear.default') == steps * len(layers)
    assert calls.count('lamp.premade_geglu.default') == steps * len(layers)
    for gone in ('lamp.rms_norm.default', 'lamp.geglu.default', 'lamp.ada_linear.default'):
        assert calls.count(gone) == (steps if gone == 'lamp.rms_norm.default' else 0), gone
    if gated == 'fused':  # one norm_pieces a step (the first layer); the rest from epilogues
        assert calls.count('lamp.norm_pieces.default') == steps
        assert calls.count('lamp.gated_linear_prep.default') == steps * (2 * len(layers) - 1)
    else:
        assert calls.count('lamp.norm_pieces.default') == steps * 2 * len(layers)
        assert 'lamp.gated_linear_prep.default' not in calls


def test_expert_premade_mixed_with_other_forms_across_layers(optimised):
    """Layers whose normed parts take different forms: a down makes (x * mod, pieces) only
    for a next layer whose qkv is premade, an o only for its own premade gate_up, and a part
    that gets none (here the first layer's qkv, and the second layer's gate_up after a
    library o) makes its own with norm_pieces. The stage still computes the passes' stage."""
    graph, _, passed, values = optimised
    switched = {'denoise': copy.deepcopy(passed['denoise'])}
    use_kernels(switched)
    first, second = (layer.expert_kernels for layer in switched['denoise'].layers)
    layers = switched['denoise'].layers
    first.tiles['qkv'] = _premade_tiles(layers[0], 'qkv')  # gate_up stays fused
    second.tiles['gate_up'] = _premade_tiles(layers[1], 'gate_up')  # qkv stays fused
    second.tiles['o'] = LIBRARY
    assert [k.form('qkv') for k in (first, second)] == ['premade', 'fused']
    args = tuple(_args(graph, 'denoise', values))
    torch.testing.assert_close(_outputs(switched['denoise'], args),
                               _outputs(passed['denoise'], args), atol=2e-5, rtol=0)
    with torch.no_grad():
        program = torch.export.export(switched['denoise'], args, strict=False)
    calls = [str(n.target) for n in program.graph.nodes if n.op == 'call_function'
             and str(n.target).startswith('lamp.')]
    steps = switched['denoise'].cfg.num_steps
    # the first layer's qkv and the second's gate_up (after its library o) make their own
    assert calls.count('lamp.norm_pieces.default') == 2 * steps
    assert 'lamp.gated_linear_prep.default' not in calls  # no premade part follows a fused o
    assert calls.count('lamp.ada_linear.default') == steps  # the second layer's qkv
    assert calls.count('lamp.ada_geglu.default') == steps  # the first layer's gate_up


def _switched_on_hopper(passed, monkeypatch, options, attribute, value, count):
    """The expert stage lowered with the build `options` off a Hopper GPU (here: the switch
    stays 0, no `count`), then as on one (lowering.is_hopper stands in for the GPU: every
    layer's ExpertKernels.<attribute> takes `value`, `count` names every layer) -> (the
    switched stages, their expert layers)."""
    plain = {'denoise': copy.deepcopy(passed['denoise'])}
    assert count not in use_kernels(plain, options=options)
    assert all(getattr(layer.expert_kernels, attribute) == 0
               for layer in plain['denoise'].layers)
    monkeypatch.setattr(lowering, 'is_hopper', lambda stage: True)
    switched = {'denoise': copy.deepcopy(passed['denoise'])}
    layers = switched['denoise'].layers
    assert use_kernels(switched, options=options)[count] == len(layers)
    assert all(getattr(layer.expert_kernels, attribute) == value for layer in layers)
    return switched, layers


def test_expert_dependent_launch_mode_reaches_every_lamp_kernel(optimised, monkeypatch):
    """Dependent launch (the spec's build.expert_pdl, 2 by default, on Hopper GPUs) puts every
    lamp kernel of the expert layers on programmatic dependent launch (the fused parts' tiles
    get the mode appended, the library forms' norm and GeGLU take it): same numbers (on the CPU
    the references ignore it), and the exported program carries the mode to the GPU. Off a
    Hopper GPU it stays off."""
    graph, _, passed, values = optimised
    switched, layers = _switched_on_hopper(passed, monkeypatch, BuildOptions(expert_tma=False),
                                           'pdl', 2, 'expert_layer_pdl2')
    for i, layer in enumerate(layers):  # both forms of every part, as in the mixed test
        assert layer.expert_kernels.pdl == 2
        for j, part in enumerate(PARTS):
            if (i + j) % 2:
                layer.expert_kernels.tiles[part] = LIBRARY
    args = tuple(_args(graph, 'denoise', values))
    with torch.no_grad():
        program = torch.export.export(switched['denoise'], args, strict=False)
    torch.testing.assert_close(_outputs(program.module(), args),
                               _outputs(passed['denoise'], args), atol=2e-5, rtol=0)
    calls = [n for n in program.graph.nodes if n.op == 'call_function'
             and str(n.target).startswith('lamp.')]
    norms = [n.args[4] if len(n.args) > 4 else 0 for n in calls
             if str(n.target) == 'lamp.rms_norm.default']
    steps = switched['denoise'].cfg.num_steps  # each step's final norm belongs to no layer
    assert set(norms) == {0, 2} and norms.count(0) == steps
    assert {n.args[-1] for n in calls if str(n.target) == 'lamp.geglu.default'} == {2}
    fused = [(str(n.target), n.args[4] if 'gated' in str(n.target) else n.args[-1])
             for n in calls
             if str(n.target) in ('lamp.gated_linear.default', 'lamp.mqa_attention.default')]
    assert {target for target, _ in fused} == {'lamp.gated_linear.default',
                                               'lamp.mqa_attention.default'}
    assert all(tiles[-1] == 2 for _, tiles in fused), fused


def test_expert_gated_gemms_take_descriptor_loads_where_asked(optimised, monkeypatch):
    """Descriptor loads for the fused gated GEMMs (the spec's build.expert_tma, on by default,
    on Hopper GPUs) append the flag after the dependent-launch mode to o's and down's tiles
    only, in the fused form only (gated_linear and gated_linear_prep both carry it into the
    exported program); the numbers stay the passes' (the CPU references ignore tiles; the GPU
    kernel's bit-identity is test_triton_kernels'). Off a Hopper GPU it stays off."""
    graph, _, passed, values = optimised
    switched, layers = _switched_on_hopper(passed, monkeypatch, BuildOptions(expert_pdl=0),
                                           'tma', 1, 'expert_gated_tma')
    first, second = (layer.expert_kernels for layer in layers)
    first.tiles['gate_up'] = _premade_tiles(layers[0], 'gate_up')  # o makes its input: prep
    second.tiles['down'] = LIBRARY  # a library down takes no flag
    assert first._tiles('qkv') == first.tiles['qkv']  # the normed parts take none
    assert first._tiles('o') == [*first.tiles['o'], 0, 1]
    assert second._tiles('down') == LIBRARY
    args = tuple(_args(graph, 'denoise', values))
    with torch.no_grad():
        program = torch.export.export(switched['denoise'], args, strict=False)
    torch.testing.assert_close(_outputs(program.module(), args),
                               _outputs(passed['denoise'], args), atol=2e-5, rtol=0)
    gated = {}
    for n in program.graph.nodes:
        target = str(n.target)
        if n.op == 'call_function' and target.startswith('lamp.gated_linear'):
            tiles = n.args[5] if 'prep' in target else n.args[4]
            gated.setdefault(target, set()).add(tuple(tiles[7:]))
    steps = switched['denoise'].cfg.num_steps
    assert gated == {'lamp.gated_linear.default': {(0, 1)},
                     'lamp.gated_linear_prep.default': {(0, 1)}}, gated
    assert sum(n.op == 'call_function' and str(n.target) == 'lamp.gated_linear_prep.default'
               for n in program.graph.nodes) == steps


@pytest.mark.parametrize('flash', [True, False])
def test_prefix_attention_agrees_in_either_form(optimised, flash):
    """The prefix's attention as one flash kernel or two GEMMs around the masked softmax, as the
    build's timing chose: both compute the passes' stage, and the export names the one taken."""
    graph, _, passed, values = optimised
    switched = {'prefix': copy.deepcopy(passed['prefix'])}
    chosen = {}
    use_kernels(switched, chosen)
    assert [key.split()[0] for key in chosen if not key.startswith('linear ')] == \
        ['prefix_attention']
    for layer in switched['prefix'].layers:
        if not flash:
            layer.attn.flash_tiles = LIBRARY
    args = tuple(_args(graph, 'prefix', values))
    torch.testing.assert_close(_outputs(switched['prefix'], args),
                               _outputs(passed['prefix'], args), atol=2e-5, rtol=0)
    with torch.no_grad():
        program = torch.export.export(switched['prefix'], args, strict=False)
    targets = {str(n.target) for n in program.graph.nodes if n.op == 'call_function'}
    assert ('lamp.mqa_flash.default' in targets) == flash
    assert ('lamp.masked_softmax.default' in targets) == (not flash)


def test_expert_rope_in_qkv_keeps_the_outputs_and_exports(optimised, monkeypatch):
    """A premade qkv that rotates q and k in its epilogue and the attention that reads them so
    (the spec's build.expert_rope_in_qkv: 'always' asks for the pair here; 'timed', the
    default, times it on the GPU against the pair as chosen): the stage computes what the
    passes' stage does, the exported program names the two operators instead of
    premade_linear and mqa_attention, and the pair's tiles are its own forms' choices. 'timed'
    off the GPU changes nothing."""
    graph, _, passed, values = optimised
    switched = {'denoise': copy.deepcopy(passed['denoise'])}
    use_kernels(switched)
    stage = switched['denoise']
    layers = stage.layers
    for layer in layers:
        layer.expert_kernels.tiles['qkv'] = _premade_tiles(layer, 'qkv')
    out = {}
    expert_layers._choose_rope(stage, layers, {}, False, out, 'timed')
    assert out == {} and not any(layer.expert_kernels.rope for layer in layers)
    expert_layers._choose_rope(stage, layers, {}, False, out, 'always')
    w = layers[0].attn.in_proj.linears()[0].weight
    d = stage.cfg.expert.head_dim
    for layer in layers:
        kern = layer.expert_kernels
        assert kern.rope == 1 and kern.rotates_in_qkv()
        assert kern.tiles['qkv'] == tuning.rope_premade_candidates(
            50, w.shape[0], w.shape[1], d, w.element_size())[0]
        assert kern.tiles['attention'] == tuning.attention_candidates(d, rotated=True)[0]
    assert sorted(key.split()[0] for key in out) == ['attention_rotated', 'qkv_rope']
    # the lowering's counts (plan.json's, what `lamp diff` compares) name the pair
    assert use_kernels({'denoise': stage})['expert_rope_in_qkv'] == len(layers)
    args = tuple(_args(graph, 'denoise', values))
    torch.testing.assert_close(_outputs(stage, args), _outputs(passed['denoise'], args),
                               atol=2e-5, rtol=0)
    with torch.no_grad():
        program = torch.export.export(stage, args, strict=False)
    torch.testing.assert_close(_outputs(program.module(), args),
                               _outputs(passed['denoise'], args), atol=2e-5, rtol=0)
    calls = [str(n.target) for n in program.graph.nodes if n.op == 'call_function'
             and str(n.target).startswith('lamp.')]
    steps = stage.cfg.num_steps
    assert calls.count('lamp.premade_linear_rope.default') == steps * len(layers)
    assert calls.count('lamp.mqa_attention_rotated.default') == steps * len(layers)
    assert 'lamp.premade_linear.default' not in calls
    assert 'lamp.mqa_attention.default' not in calls


def test_a_rope_form_whose_every_tiling_fails_leaves_the_layers_as_chosen(
        optimised, monkeypatch):
    """Where every tiling of the rotating qkv is refused (tuning.pick raises; stood in for
    here, since off the GPU nothing is timed or refused), the build goes on with the parts as
    chosen and plan.json says why, instead of failing."""
    _, _, passed, _ = optimised
    switched = {'denoise': copy.deepcopy(passed['denoise'])}
    use_kernels(switched)
    stage = switched['denoise']
    for layer in stage.layers:
        layer.expert_kernels.tiles['qkv'] = _premade_tiles(layer, 'qkv')
    before = [dict(layer.expert_kernels.tiles) for layer in stage.layers]

    def refuse(*args, **kwargs):
        raise RuntimeError('tuning: every candidate failed: {...}')
    monkeypatch.setattr(tuning, 'pick', refuse)
    out = {}
    expert_layers._choose_rope(stage, stage.layers, {}, False, out, 'always')
    assert [dict(layer.expert_kernels.tiles) for layer in stage.layers] == before
    assert not any(layer.expert_kernels.rotates_in_qkv() for layer in stage.layers)
    (key, record), = out.items()
    assert key.startswith('qkv_rope') and record['tiles'] is None
    assert record['source'].startswith('every candidate failed')
