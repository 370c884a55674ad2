"""Which kernel runs the prefix's attentions: `lamp::mqa_flash`, or two GEMMs around
`lamp::masked_softmax`, whichever the build GPU ran faster at the prefix's length."""

import torch

from lamp_ros.kernels import tuning
from lamp_ros.policies.pi05.cuda.choices import recorded
from lamp_ros.policies.pi05.staged.expert_kernels import LIBRARY
from lamp_ros.policies.pi05.staged.stages import PrefixStage


def flash_prefix_attention(stage: PrefixStage, tuning_out: dict, cache: dict) -> int:
    """`lamp::mqa_flash` for the prefix's attentions (one K/V head, on the kernel path) where
    the build GPU ran it faster than two GEMMs around `lamp::masked_softmax` -> layers moved."""
    attns = [layer.attn for layer in stage.layers
             if not layer.kv_only and layer.attn.kernel and layer.attn.folds_heads
             and layer.attn.flash_tiles is None]
    if not attns:
        return 0
    c, n = attns[0].cfg, stage.cfg.prefix_len
    # a weight in the stage's precision: an o_proj in FP8 (a precision plan) holds e4m3 codes
    weight = next(p for p in stage.parameters() if p.is_floating_point() and p.element_size() > 1)
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
    tuning_out[key] = recorded(choice)
    for attn in attns:
        attn.flash_tiles = choice.tiles
    return len(attns) if choice.tiles else 0
