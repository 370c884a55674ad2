"""Switch model stages in the passes' form onto lamp_ros's kernels (the cuda backend's lowering).

What changes, per stage: unit RMSNorms and per-step adaRMS norms become `lamp::rms_norm` (one
kernel instead of six), the vision's affine-free LayerNorms `lamp::layer_norm`, a norm that reads a
residual sum whose GEMM could not add the residual (a bias epilogue, FP8) `lamp::add_norm` (the add
and the norm in one kernel), RoPE becomes `lamp::rope` with the cos/sin rows gathered once per
stage call instead of per layer (`lamp::rope_qk`: a layer's q and k in one launch), GeGLU becomes
`lamp::geglu`, and residual adds move into the GEMM epilogue (`addmm` with beta = 1; `addcmul`
where the adaRMS gate scales the branch), FP8 linears (the fp8_prefix_mlp pass) of a bf16 stage
become float8 codes for torch._scaled_mm with their rows quantised by `lamp::fp8_rows`,
`lamp::rms_norm_fp8` (the norm before them, in the same pass; `lamp::add_rms_norm_fp8` when the
attention output is still to be added: DecoderLayer.defers_attention_residual) or
`lamp::geglu_fp8`, and an
attention fused by its pass with one K/V head becomes two GEMMs with every query head as rows
around `lamp::masked_softmax` (on the H200 the fused cuDNN kernel, given one (batch, head) of work,
ran 93 us per call at the expert's 50 queries: 53% of the inference), and the vision blocks' fc1
takes its GELU in the cuBLASLt epilogue (on a GPU; VisionBlock.hidden). Stages still in the eager
form (no graph pass ran) are left alone. The numbers are those of the float32 reference code,
rounded once instead of after every op, so parity holds at the group precision.

Then every expert layer in the passes' final form (adaRMS tables, merged q/k/v and gate/up, one
K/V head) gets its `ExpertKernels` (policies/pi05/staged/expert_kernels.py): five parts, each
either
a fused lamp kernel (kernels/triton_expert.py) with tiles, or its library form, whichever this
GPU ran fastest at the real shapes (kernels/tuning.py, which keeps the H200's choices in
kernels/tiles/); `tuning_out` receives the choices, where they came from, and their timings.
How far the lowering goes is the spec's `build:` options (spec/build_options.py), which
plan.json records.
The prefix's attentions get the same choice between `lamp::mqa_flash` (one flash kernel) and
their two GEMMs around `lamp::masked_softmax`, and the vision's and prefix's plain linears a
choice of how their weights are stored for cuBLAS ((out, in) as nn.Linear, or (in, out):
`KNLinear`), then of the cuBLASLt algorithm each runs at each row count it will see (`LtLinear`,
where one beats torch's op: choose_gemm_algorithms), each timed the same way and recorded with
the tiles.
"""

import torch

from lamp_ros.kernels import operators as kernel_ops, tuning
from lamp_ros.kernels.linears import Fp8Linear, KNLinear, LtLinear
from lamp_ros.policies.pi05.staged.expert_kernels import (ExpertKernels, FIRST_PIECES, LIBRARY,
                                                          LOG2E)
from lamp_ros.policies.pi05.staged.modules import (Attention, DecoderLayer, GeGLU, Rotary,
                                                   StepAdaRMSNorm, UnitLayerNorm, UnitRMSNorm,
                                                   VisionBlock)
from lamp_ros.policies.pi05.staged.stages import ExpertStage, PrefixStage, VisionStage
from lamp_ros.spec import BuildOptions

SWITCHED = {UnitRMSNorm: 'rms_norm', UnitLayerNorm: 'layer_norm',
            StepAdaRMSNorm: 'ada_rms_norm', Rotary: 'rope', GeGLU: 'geglu',
            DecoderLayer: 'residual_epilogues', Attention: 'attention',
            VisionBlock: 'gelu_epilogue'}


def use_kernels(modules: dict, tuning_out: dict | None = None,
                text_lengths: tuple = (), options: BuildOptions | None = None,
                measure_tiles: bool = False) -> dict:
    """Turn the kernel switch on in every module that has one, give every expert layer in the
    fused kernels' form its step constants and the prefix's attentions their measured form, in
    place -> {what: count} of the switched modules that run (not those an expert layer's
    fused or premade parts bypass, which the expert_* counts stand for). `text_lengths`: the
    prompt lengths the group is captured for (backends/text_lengths.py; the full one last),
    whose row counts the prefix's GEMM algorithms are chosen at. `measure_tiles`: time every
    choice on the build GPU even where its tile cache holds one (`lamp compile
    --measure-tiles`)."""
    counts = {}
    out = tuning_out if tuning_out is not None else {}
    options = options or BuildOptions()
    for stage in modules.values():
        weight = next(stage.parameters(), None)
        cache = {} if measure_tiles or weight is None else _tile_cache(weight.device)
        for module in stage.modules():
            if isinstance(module, Fp8Linear) and not module.kernel \
                    and module.codes.dtype == torch.bfloat16 and module.codes.is_cuda:
                module.use_kernel()  # torch._scaled_mm's row-wise scales want a bf16 output
                counts['fp8_linear'] = counts.get('fp8_linear', 0) + 1
                continue
            what = SWITCHED.get(type(module))
            if what is None or module.kernel:
                continue
            module.kernel = True
            counts[what] = counts.get(what, 0) + 1
        if isinstance(stage, ExpertStage):
            fused = fuse_expert_layers(stage, out, cache, options.expert_rope_in_qkv)
            if fused:
                counts['expert_layer'] = fused
                for what, bypassed in bypassed_modules(stage).items():
                    counts[what] -= bypassed
                    if not counts[what]:
                        del counts[what]
            for part in ('qkv', 'gate_up'):  # premade forms: their norm kernels never run
                premade = sum(layer.expert_kernels is not None
                              and layer.expert_kernels.form(part) == 'premade'
                              for layer in stage.layers)
                if premade:
                    counts[f'expert_premade_{part}'] = premade
            rotating = sum(layer.expert_kernels is not None
                           and layer.expert_kernels.rotates_in_qkv() for layer in stage.layers)
            if rotating:
                counts['expert_rope_in_qkv'] = rotating
            pdl = _on_hopper(stage, options.expert_pdl)
            if fused and pdl:
                for layer in stage.layers:
                    if layer.expert_kernels is not None:
                        layer.expert_kernels.pdl = pdl
                counts[f'expert_layer_pdl{pdl}'] = fused
            tma = _on_hopper(stage, int(options.expert_tma))
            if fused and tma:
                for layer in stage.layers:
                    if layer.expert_kernels is not None:
                        layer.expert_kernels.tma = tma
                counts['expert_gated_tma'] = fused
        if isinstance(stage, PrefixStage):
            fused = flash_prefix_attention(stage, out, cache)
            if fused:
                counts['flash_attention'] = fused
        if isinstance(stage, (VisionStage, PrefixStage)):
            moved = choose_weight_layouts(stage, out, cache)
            if moved:
                counts['kn_weights'] = counts.get('kn_weights', 0) + moved
            stored = choose_gemm_algorithms(stage, out, text_lengths, cache) \
                if options.gemm_algorithms else 0
            if stored:
                counts['cublaslt_linear'] = counts.get('cublaslt_linear', 0) + stored
    return counts


def bypassed_modules(stage: ExpertStage) -> dict:
    """{what: count} of the switched modules in the expert's layers that their ExpertKernels
    never call, so that the counts say which kernels run: a layer's residual epilogues (every
    form of its o and down takes the residual itself), the adaRMS norm before a part in its
    fused or premade form (and the GeGLU after gate_up's), the attention module unless the
    attention part is in its library form."""
    out = {}
    for layer in stage.layers:
        kern = layer.expert_kernels
        if kern is None:
            continue
        skipped = [layer]
        if kern.form('qkv') != 'library':
            skipped.append(layer.input_norm)
        if kern.form('gate_up') != 'library':
            skipped += [layer.post_attn_norm, layer.mlp]
        if kern.form('attention') != 'library':
            skipped.append(layer.attn)
        for module in skipped:
            what = SWITCHED.get(type(module))
            if what is not None and module.kernel:
                out[what] = out.get(what, 0) + 1
    return out


def is_hopper(stage) -> bool:
    """The stage's weights are on a Hopper or later GPU (dependent launch, tensor descriptors)."""
    weight = next(stage.parameters(), None)
    return weight is not None and weight.device.type == 'cuda' and \
        torch.cuda.get_device_capability(weight.device) >= (9, 0)


def _on_hopper(stage, value: int) -> int:
    """`value` (a build option: the expert's dependent-launch mode, its gated GEMMs'
    descriptor loads) where the stage runs on a Hopper or later GPU, else 0.

    Dependent launch (mode 2, the default): each lamp kernel of the expert's layers waits for
    the kernel before it at its first line and lets the next one launch after its main loop,
    so the launch and the next kernel's start overlap this one's tail (measured on the whole
    graph, one artifact timed with it on and off: actions bit-identical, about 2% faster;
    docs/notebook). Descriptor loads: the fused gated GEMMs (o, down) load x and W by tensor
    descriptor instead of by pointer, the same numbers bit for bit; set after the timing, so
    the tile cache's timings stay comparable."""
    return value if is_hopper(stage) else 0


NK, KN = [0], [1]  # the weight-layout choices' tiles: (out, in) as nn.Linear, or (in, out)


def _layout_sites(stage, kinds=(torch.nn.Linear,)) -> tuple:
    """(rows of the stage's GEMMs, [(owner, attribute)] of its plain linears (of `kinds`)
    that are only ever called as modules: the vision blocks' q/k/v, out_proj and fc2, the
    prefix layers' q/k/v, and their o where the MLP's norm adds its residual
    (defers_attention_residual). Not fc1, whose GELU epilogue reads its weight, nor an o whose
    residual epilogue does.) The vision's rows are its images' patches, timed at the stage's
    own cameras; the prefix's at its full prompt length."""
    if isinstance(stage, VisionStage):
        sites = [(b.attn_in, attr) for b in stage.blocks for attr, _, _ in b.attn_in.parts]
        sites += [(b, attr) for b in stage.blocks for attr in ('out_proj', 'fc2')]
        rows = stage.cameras * stage.cfg.num_patches
    else:
        sites = [(layer.attn.in_proj, attr) for layer in stage.layers
                 for attr, _, _ in layer.attn.in_proj.parts]
        sites += [(layer.attn, 'o_proj') for layer in stage.layers
                  if layer.defers_attention_residual]
        rows = stage.cfg.prefix_len
    return rows, [(owner, attr) for owner, attr in sites if type(getattr(owner, attr)) in kinds]


def choose_weight_layouts(stage, tuning_out: dict, cache: dict) -> int:
    """Store each plain linear's weight (out, in) as nn.Linear does, or (in, out) (KNLinear),
    whichever layout cuBLAS ran faster on the build GPU: one choice per GEMM shape, timed at
    the stage's rows over all its linears of that shape, each on its own weights (from HBM, as
    in the inference) -> linears now stored (in, out). Off the GPU the layout stays."""
    rows, sites = _layout_sites(stage)
    groups = {}
    for owner, attr in sites:
        lin = getattr(owner, attr)
        key = f'linear {rows}x{lin.in_features}->{lin.out_features}' + \
            (' +bias' if lin.bias is not None else '')
        groups.setdefault(key, []).append((owner, attr))
    moved = 0
    for key, group in groups.items():
        linears = [getattr(owner, attr) for owner, attr in group]
        weight = linears[0].weight
        on_gpu = weight.is_cuda
        x = torch.randn(rows, weight.shape[1], dtype=weight.dtype, device=weight.device)
        transposed = [KNLinear(lin) for lin in linears] if on_gpu else []

        def launch(tiles):
            return [lin(x) for lin in (transposed if tiles == KN else linears)]

        choice = tuning.pick([NK, KN], launch, on_gpu, cache.get(key), calls=len(group),
                             reference=NK)
        tuning_out[key] = _recorded(choice)
        if choice.tiles == KN:
            for (owner, attr), lin in zip(group, transposed or map(KNLinear, linears)):
                setattr(owner, attr, lin)
            moved += len(group)
    return moved


TORCH_GEMM = [0]  # the algorithm choices' tiles: torch's op, or [1, i] cuBLASLt's i-th
GEMM_ALGORITHMS = 8  # the heuristic's candidates timed (it offers 7-8 for these GEMMs on the H200)
GEMM_ALGORITHM_MARGIN = 0.03  # a stored algorithm must beat torch's op by this share of its time


def choose_gemm_algorithms(stage, tuning_out: dict, text_lengths: tuple = (),
                           cache: dict | None = None) -> int:
    """Run each plain linear of the vision and the prefix (as its layout was chosen) on the
    cuBLASLt algorithm the build GPU ran fastest, at each row count the stage will see (the
    prefix: one per prompt length), where it beats torch's op (cuBLASLt's heuristic's first
    pick) by GEMM_ALGORITHM_MARGIN -> linears now LtLinear. One choice per GEMM shape and row
    count, timed as the layouts are (each linear of the shape on its own weights) and checked
    against torch's op first (tuning.pick). Measured on the H200 at the prefix's 832 rows: o
    18.3 us on the heuristic's pick against 13.6 on its second (kernels/cublaslt.py). Off the
    GPU, in other dtypes than bf16, or with the spec's `build.gemm_algorithms: false`, nothing
    changes."""
    rows, sites = _layout_sites(stage, kinds=(torch.nn.Linear, KNLinear))
    if not sites:
        return 0
    first = getattr(*sites[0])
    weight = first.weight_t if isinstance(first, KNLinear) else first.weight
    if not weight.is_cuda or weight.dtype != torch.bfloat16:
        return 0
    from lamp_ros.kernels import cublaslt
    built_for = cublaslt.identity(weight.device)
    row_counts = [rows]
    if isinstance(stage, PrefixStage) and text_lengths:
        row_counts = [stage.cfg.image_tokens + length for length in text_lengths]
    groups = {}
    for owner, attr in sites:
        lin = getattr(owner, attr)
        kn = isinstance(lin, KNLinear)
        groups.setdefault((lin.in_features, lin.out_features, lin.bias is not None, kn),
                          []).append((owner, attr))
    cache, stored = cache or {}, 0
    for (k, n, bias, kn), group in groups.items():
        linears = [getattr(owner, attr) for owner, attr in group]
        chosen = {}
        for m in row_counts:
            key = (f'cublaslt{built_for["cublaslt"]} linear {m}x{k}->{n}'
                   + (' +bias' if bias else '') + (' (in, out)' if kn else ''))
            spec = cublaslt.GemmSpec(m, n, k, 'bias' if bias else 'none', weight_kn=kn)
            algos = cublaslt.plan_for(spec).algorithms(GEMM_ALGORITHMS)
            x = torch.randn(m, k, dtype=weight.dtype, device=weight.device)
            on_algo = {}

            def launch(tiles, x=x, m=m, algos=algos, on_algo=on_algo):
                if tiles == TORCH_GEMM:
                    return [lin(x) for lin in linears]
                i = tiles[1]
                if i not in on_algo:
                    on_algo[i] = [LtLinear(lin, {m: algos[i]}, built_for) for lin in linears]
                return [lin(x) for lin in on_algo[i]]

            choice = tuning.pick([TORCH_GEMM] + [[1, i] for i in range(len(algos))], launch,
                                 True, cache.get(key), calls=len(group), reference=TORCH_GEMM)
            choice = _within_margin(choice)
            tuning_out[key] = _recorded(choice)
            if choice.tiles != TORCH_GEMM:
                chosen[m] = algos[choice.tiles[1]]
        if chosen:
            for (owner, attr), lin in zip(group, linears):
                setattr(owner, attr, LtLinear(lin, chosen, built_for))
            stored += len(group)
    return stored


def _within_margin(choice: tuning.Choice) -> tuning.Choice:
    """torch's op where the fastest stored algorithm does not beat it by GEMM_ALGORITHM_MARGIN
    (the heuristic's own pick often ties it: nothing to gain from depending on the library)."""
    if choice.source != 'measured' or choice.tiles == TORCH_GEMM:
        return choice
    ours = choice.timings.get(str(TORCH_GEMM))
    best = choice.timings[str(choice.tiles)]
    if isinstance(ours, float) and best > ours * (1 - GEMM_ALGORITHM_MARGIN):
        choice.tiles = list(TORCH_GEMM)
    return choice


def _recorded(choice: tuning.Choice) -> dict:
    """What plan.json keeps of a choice: the tiles, where they came from, every candidate's
    time and its disagreement with the reference form."""
    return {'tiles': choice.tiles, 'source': choice.source, 'timings': choice.timings,
            'errors': choice.errors}


def _tile_cache(device) -> dict:
    return tuning.cached_tiles(torch.cuda.get_device_name(device)) if device.type == 'cuda' \
        else {}


def flash_prefix_attention(stage: PrefixStage, tuning_out: dict, cache: dict) -> int:
    """`lamp::mqa_flash` for the prefix's attentions (one K/V head, on the kernel path) where
    the build GPU ran it faster than two GEMMs around `lamp::masked_softmax` -> layers moved."""
    attns = [layer.attn for layer in stage.layers
             if not layer.kv_only and layer.attn.kernel and layer.attn.folds_heads
             and layer.attn.flash_tiles is None]
    if not attns:
        return 0
    c, n = attns[0].cfg, stage.cfg.prefix_len
    weight = attns[0].o_proj.weight
    like = dict(dtype=weight.dtype, device=weight.device)
    q = torch.randn(1, n, c.num_heads, c.head_dim, **like)
    k, v = torch.randn(2, 1, n, 1, c.head_dim, **like)
    mask = torch.ones(1, n, n, dtype=torch.bool, device=weight.device)

    def launch(tiles):
        attns[0].flash_tiles = tiles
        return attns[0].attention(q, k, v, mask)

    key = f'prefix_attention {n}x{c.num_heads}x{c.head_dim}'
    choice = tuning.pick(tuning.flash_candidates() + [LIBRARY], launch,
                         weight.device.type == 'cuda', cache.get(key), reference=LIBRARY)
    tuning_out[key] = _recorded(choice)
    for attn in attns:
        attn.flash_tiles = choice.tiles
    return len(attns) if choice.tiles else 0


def fuse_expert_layers(stage: ExpertStage, tuning_out: dict, cache: dict,
                       rope: str = 'timed') -> int:
    """ExpertKernels, with each part's measured choice, for every expert layer they can run.
    Layers of one weight shape share a choice, timed over all of them (see _tuning_problems)."""
    layers = [layer for layer in stage.layers
              if layer.expert_kernels is None and ExpertKernels.applies(layer)]
    if not layers or not stage.rotary.kernel:
        return 0
    device = layers[0].attn.o_proj.weight.device
    on_gpu = device.type == 'cuda'
    groups = {}  # the layer's weight shapes -> its layers: same shapes, same choices
    for layer in layers:
        layer.expert_kernels = ExpertKernels(layer)
        groups.setdefault(tuple(tuple(p.shape) for p in layer.parameters()), []).append(layer)
    for group in groups.values():
        chosen = {}
        for part, (shape, candidates, launch) in _tuning_problems(stage, group).items():
            key = f'{part} {shape}'
            choice = tuning.pick(candidates, launch, on_gpu, cache.get(key), calls=len(group),
                                 reference=LIBRARY)
            tuning_out[key] = _recorded(choice)
            chosen[part] = choice.tiles
        for layer in group:
            layer.expert_kernels.tiles.update(chosen)
        _choose_rope(stage, group, cache, on_gpu, tuning_out, rope)
    return len(layers)


def _choose_rope(stage: ExpertStage, layers: list, cache: dict, on_gpu: bool,
                 tuning_out: dict, rope: str = 'timed') -> None:
    """ExpertKernels.rope for `layers` (one weight shape, their parts chosen): the premade qkv
    with its rope epilogue and the rotated attention, each tiled on its own (their candidates
    checked against the operators' float32 references), then the pair timed against the pair
    as chosen ('rope_in_qkv': [0] as chosen, [1] rotated in the qkv GEMM; the attention's
    outputs must agree). The faster pair's tiles and switch go to every layer of `layers`.
    `rope` (the spec's build.expert_rope_in_qkv): 'timed' decides by that timing on the GPU
    and never rotates off it, 'always' rotates where the forms allow, 'never' does not."""
    kern = layers[0].expert_kernels
    if rope == 'never' or (rope == 'timed' and not on_gpu) or kern.form('qkv') != 'premade' \
            or kern.tiles['attention'] == LIBRARY:
        return
    cfg, layer = stage.cfg, layers[0]
    heads, d, rows, prefix = cfg.expert.num_heads, cfg.expert.head_dim, cfg.action_horizon, \
        cfg.prefix_len
    w = layer.attn.in_proj.linears()[0].weight
    like = dict(dtype=w.dtype, device=w.device)
    x = torch.randn(1, rows, w.shape[1], **like)
    prefix_kv = [torch.randn(2, 1, prefix, 1, d, **like) for _ in layers]
    angle = torch.randn(1, rows, d // 2, device=w.device)
    rotation = (angle.cos(), angle.sin())
    mask = torch.ones(1, rows, prefix + rows, dtype=torch.bool, device=w.device)
    pieces = min(FIRST_PIECES, x.shape[-1])
    carries = [kernel_ops.norm_pieces(x, each.expert_kernels.attn_mod[0], pieces)
               for each in layers]
    plain = {part: kern.tiles[part] for part in ('qkv', 'attention')}
    q_scale = d ** -0.5 * LOG2E
    qkv_rotated = [kernel_ops.premade_linear_rope_reference(
        *carries[i], each.attn.in_proj.linears()[0].weight, each.expert_kernels.attn_bias[0],
        *rotation, heads, q_scale, each.input_norm.eps) for i, each in enumerate(layers)]

    def run(settings, body):
        outputs = []
        for i, each in enumerate(layers):
            k = each.expert_kernels
            k.rope, k.tiles['qkv'], k.tiles['attention'] = settings
            outputs.append(body(i, each, k))
        return outputs

    def qkv_launch(tiles):
        if tiles == LIBRARY:  # the operators' float32 references: the check, not timed
            return qkv_rotated
        return run((1, tiles, plain['attention']),
                   lambda i, L, k: k.qkv(L, x, 0, carries[i], rotation))

    def attention_launch(tiles):
        if tiles == LIBRARY:
            return [kernel_ops.mqa_attention_rotated_reference(
                qkv_rotated[i], *prefix_kv[i], mask, heads, 1 / LOG2E)
                for i in range(len(layers))]
        return run((1, plain['qkv'], tiles), lambda i, L, k: k.attention(
            L, qkv_rotated[i], *prefix_kv[i], mask, rotation))

    shape = f'{rows}x{w.shape[0]}x{w.shape[1]}'
    attention_shape = f'{rows}x{heads}x{d} over {prefix}+{rows}'
    problems = ((f'qkv_rope {shape}', tuning.rope_premade_candidates(
                    rows, w.shape[0], w.shape[1], d, w.element_size()), qkv_launch),
                (f'attention_rotated {attention_shape}',
                 tuning.attention_candidates(d, rotated=True), attention_launch))
    if not all(candidates for _, candidates, _ in problems):
        return  # no tiling fits these heads: the layers stay as chosen
    as_chosen, picked = (0, plain['qkv'], plain['attention']), {}
    for key, candidates, launch in problems:
        try:
            choice = tuning.pick(candidates + [LIBRARY], launch, on_gpu, cache.get(key),
                                 calls=len(layers), reference=LIBRARY, time_reference=False)
        except RuntimeError as exc:  # every tiling refused here: an option lost, not a build
            tuning_out[key] = {'tiles': None, 'source': f'every candidate failed: {exc}'[:400]}
            run(as_chosen, lambda *_: None)
            return
        tuning_out[key] = _recorded(choice)
        picked[key.split()[0]] = choice.tiles
    rotated = (1, picked['qkv_rope'], picked['attention_rotated'])
    on = rope == 'always'
    if rope == 'timed':
        def pair(tiles):
            return run(rotated if tiles == [1] else as_chosen,
                       lambda i, L, k: k.attention(L, k.qkv(L, x, 0, carries[i], rotation),
                                                   *prefix_kv[i], mask, rotation))
        key = f'rope_in_qkv {shape} + {attention_shape}'
        choice = tuning.pick([[0], [1]], pair, on_gpu, cache.get(key), calls=len(layers),
                             reference=[0])
        tuning_out[key] = _recorded(choice)
        on = choice.tiles == [1]
    run(rotated if on else as_chosen, lambda *_: None)


def _tuning_problems(stage: ExpertStage, layers: list) -> dict:
    """part -> (shape label, candidates: the fused kernel's tilings then the library form,
    launch(tiles)) on random activations of the real shapes (batch 1, the action horizon, the
    config's prefix length). One launch runs the part once per layer of `layers`, each with its
    own weights (and its own prefix K/V), as one Euler step does: the weights come from HBM,
    not from an L2 cache warmed by the same 4-17 MB on the previous replay, which would time
    a different problem (kernels bound by L2 latency instead of HBM streaming). Off the GPU
    the first fused tiling is taken untimed."""
    cfg, layer = stage.cfg, layers[0]
    w_qkv = layer.attn.in_proj.linears()[0].weight
    w_gate_up, w_o, w_down = (layer.mlp.in_proj.linears()[0].weight, layer.attn.o_proj.weight,
                              layer.mlp.down_proj.weight)
    rows, heads, d, prefix = cfg.action_horizon, cfg.expert.num_heads, cfg.expert.head_dim, \
        cfg.prefix_len
    like = dict(dtype=w_qkv.dtype, device=w_qkv.device)
    x = torch.randn(1, rows, w_qkv.shape[1], **like)
    qkv = torch.randn(1, rows, w_qkv.shape[0], **like)
    a = torch.randn(1, rows, w_o.shape[1], **like)
    h = torch.randn(1, rows, w_down.shape[1], **like)
    prefix_kv = [torch.randn(2, 1, prefix, 1, d, **like) for _ in layers]
    angle = torch.randn(1, rows, d // 2, device=w_qkv.device)
    rotation = (angle.cos(), angle.sin())
    mask = torch.ones(1, rows, prefix + rows, dtype=torch.bool, device=w_qkv.device)

    def timed(part, run):
        def launch(tiles):
            outputs = []
            for i, each in enumerate(layers):
                each.expert_kernels.tiles[part] = tiles
                outputs.append(run(i, each, each.expert_kernels))
            return outputs
        return launch

    def gemm(part, n, k, run, premade=''):
        """The fused tilings, the premade ones where the part has that form ('linear' or
        'geglu'), the library."""
        extra = tuning.premade_candidates(rows, n, k, premade == 'geglu',
                                          w_qkv.element_size()) if premade else []
        return (f'{rows}x{n}x{k}', tuning.gemm_candidates(rows, n, k) + extra + [LIBRARY],
                timed(part, run))

    # the premade forms' input, as the gated GEMM before them would make it (made here, not
    # timed), with each layer's own step-0 modulation so that every form computes the same
    # numbers (pick checks them against the library form)
    pieces = min(FIRST_PIECES, x.shape[-1])
    carries = {mod: [kernel_ops.norm_pieces(x, getattr(each.expert_kernels, mod)[0], pieces)
                     for each in layers] for mod in ('attn_mod', 'mlp_mod')}
    return {
        'qkv': gemm('qkv', *w_qkv.shape,
                    lambda i, L, kern: kern.qkv(L, x, 0, carries['attn_mod'][i]), 'linear'),
        'attention': (f'{rows}x{heads}x{d} over {prefix}+{rows}',
                      tuning.attention_candidates(d) + [LIBRARY],
                      timed('attention', lambda i, L, kern: kern.attention(
                          L, qkv, *prefix_kv[i], mask, rotation))),
        'o': gemm('o', *w_o.shape, lambda i, L, kern: kern.o(L, a, x, 0)),
        'gate_up': gemm('gate_up', w_gate_up.shape[0] // 2, w_gate_up.shape[1],
                        lambda i, L, kern: kern.gate_up(L, x, 0, carries['mlp_mod'][i]),
                        'geglu'),
        'down': gemm('down', *w_down.shape, lambda i, L, kern: kern.down(L, h, x, 0)),
    }
