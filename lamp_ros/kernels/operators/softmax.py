"""`lamp::masked_softmax`: the attention probabilities of the eager code, heads folded into rows.

A single-KV-head attention is two GEMMs around one masked softmax when every query head is a
row of one matrix (triton_kernels.py on CUDA). Its reference is also the softmax of the fused
attention operators' references (attention.py).
"""

import torch

from lamp_ros.kernels.operators.lazy_triton import load_triton_kernels as _triton


@torch.library.custom_op('lamp::masked_softmax', mutates_args=())
def masked_softmax(scores: torch.Tensor, mask: torch.Tensor, heads: int,
                   scale: float) -> torch.Tensor:
    """softmax(scale * scores) where `mask` allows, float32 inside, scores' dtype out.

    scores (b, n * heads, m), rows token-major (row = token * heads + head: every query head of
    a single-KV-head attention as one matrix); mask (b, n, m) bool, shared by a token's heads.
    Masked logits get the eager code's finite fill, so a fully masked row is uniform, not NaN."""
    if scores.is_cuda:
        return _triton().masked_softmax(scores, mask, heads, scale)
    return masked_softmax_reference(scores, mask, heads, scale)


def masked_softmax_reference(scores, mask, heads, scale):
    logits = scores.float() * scale
    logits = logits.masked_fill(~mask.repeat_interleave(heads, dim=1),
                                torch.finfo(torch.float32).min)
    return logits.softmax(-1).to(scores.dtype)


@masked_softmax.register_fake
def _(scores, mask, heads, scale):
    return torch.empty(scores.shape, dtype=scores.dtype, device=scores.device)
