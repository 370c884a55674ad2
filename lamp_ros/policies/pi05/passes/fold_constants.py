"""fold_constants: compute once, at compile time, what every call recomputes from constants.

- RoPE: the frequencies and their cos/sin depend on the position only, and positions are
  integers in a known range: prefix tokens at cumsum(mask) - 1 in [-1, T - 1], suffix tokens at
  sum(mask) + i in [0, T + horizon - 1]. Each stage gets cos/sin tables over that range and
  looks its positions up (the positions themselves depend on the masks and stay dynamic).
- Prefix: the embedding's sqrt(width) scale goes into the embedding table.
- Expert, while the time MLP is still there: the sine-cosine embedding of the fixed step times
  becomes a (steps, width) table (precompute_time_conditioning, when on, goes further).
Tables come from the same float32 ops as the runtime computation. The vision stage holds no
foldable constant (its position embedding is already a weight). A group built in bf16/fp16
casts the tables with the weights: cos/sin then round like the activations they multiply.
"""

import torch

from lamp_ros.policies.pi05.passes.stage_rewrite import rewrite
from lamp_ros.policies.pi05.model import posemb_sincos


def _rotary(stage, first: int, last: int, found: dict) -> None:
    if stage.rotary.cos is None:
        stage.rotary.fold(first, last, next(stage.parameters()).device)
        found['rope_positions'] = [first, last]


def _prefix(stage) -> dict:
    found = {}
    _rotary(stage, -1, stage.cfg.prefix_len - 1, found)
    if stage.embed_scale is not None:
        table = stage.embed.weight
        table.copy_((table * stage.embed_scale).to(table.dtype))
        found['embed_scale'] = stage.embed_scale
        stage.embed_scale = None
    return found


def _expert(stage) -> dict:
    cfg = stage.cfg
    found = {}
    _rotary(stage, 0, cfg.prefix_len + cfg.action_horizon - 1, found)
    if not stage.time_precomputed and stage.time_embedding is None:
        device = stage.action_in_proj.weight.device
        times = torch.cat([stage.step_time(s, 1, device) for s in range(cfg.num_steps)]
                          + [torch.zeros((1,), device=device)])  # t = 0 last (rtc.py)
        stage.time_embedding = posemb_sincos(times, cfg.expert.width)
        found['time_embedding_steps'] = cfg.num_steps
    return found


def fold_constants(modules: dict) -> tuple:
    return rewrite(modules, {'prefix': _prefix, 'expert': _expert})
