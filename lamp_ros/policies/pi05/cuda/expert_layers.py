"""The expert's layers on fused kernels: each layer's `ExpertKernels` and its measured choices.

Every expert layer in the passes' final form (adaRMS tables, merged q/k/v and gate/up, one K/V
head) gets its `ExpertKernels` (policies/pi05/staged/expert_kernels.py): five parts, each either
a fused lamp kernel (kernels/triton_expert_gemm.py, triton_attention.py) with tiles, or its
library form, whichever this GPU ran fastest at the real shapes (kernels/tuning.py, which
keeps each GPU model's choices in kernels/tiles/); then whether the premade qkv rotates q and k
in its epilogue (_choose_rope).
"""

import torch

from lamp_ros.kernels import operators as kernel_ops, tuning
from lamp_ros.policies.pi05.cuda.choices import recorded
from lamp_ros.policies.pi05.staged.expert_kernels import (ExpertKernels, FIRST_PIECES, LIBRARY,
                                                          LOG2E)
from lamp_ros.policies.pi05.staged.stages import ExpertStage


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
            tuning_out[key] = recorded(choice)
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
        tuning_out[key] = recorded(choice)
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
        tuning_out[key] = recorded(choice)
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
