"""How the vision's and the prefix's plain linears run their GEMMs: weight layout, then algorithm.

cuBLAS runs the same GEMM at different speeds depending on how the weight is stored ((out, in) as
nn.Linear, or (in, out): `KNLinear`) and on which of its algorithms it picks: its heuristic's
first pick is not always the fastest at the row counts the stages see. So the build times both
on its own GPU: first the layout of each GEMM shape (choose_weight_layouts), then, for the
layout chosen, the cuBLASLt algorithm at each row count (choose_gemm_algorithms: `LtLinear`,
where one beats torch's op). Each choice is recorded with the other tiles (choices.py).
"""

import torch

from lamp_ros.kernels import tuning
from lamp_ros.kernels.linears import KNLinear, LtLinear
from lamp_ros.policies.pi05.cuda.choices import recorded
from lamp_ros.policies.pi05.staged.stages import PrefixStage, VisionStage


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
        tuning_out[key] = recorded(choice)
        if choice.tiles == KN:
            for (owner, attr), lin in zip(group, transposed or map(KNLinear, linears)):
                setattr(owner, attr, lin)
            moved += len(group)
    return moved


TORCH_GEMM = [0]  # the algorithm choices' tiles: torch's op, or [1, i] cuBLASLt's i-th
GEMM_ALGORITHMS = 8  # the heuristic's candidates timed (all it offers for these GEMMs)
GEMM_ALGORITHM_MARGIN = 0.03  # a stored algorithm must beat torch's op by this share of its time


def choose_gemm_algorithms(stage, tuning_out: dict, text_lengths: tuple = (),
                           cache: dict | None = None) -> int:
    """Run each plain linear of the vision and the prefix (as its layout was chosen) on the
    cuBLASLt algorithm the build GPU ran fastest, at each row count the stage will see (the prefix:
    one per prompt length), where it beats torch's op (cuBLASLt's heuristic's first pick) by
    GEMM_ALGORITHM_MARGIN -> linears now LtLinear. One choice per GEMM shape and row count, timed
    as the layouts are (each linear of the shape on its own weights) and checked against torch's op
    first (tuning.pick). At the prefix's 832 rows the heuristic's pick for o was clearly slower
    than its second (kernels/cublaslt.py). Off the GPU, in other dtypes than bf16, or with the
    spec's `build.gemm_algorithms: false`, nothing changes."""
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
            tuning_out[key] = recorded(choice)
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
