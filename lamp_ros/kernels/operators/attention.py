"""The fused multi-query attentions: `lamp::mqa_attention`, `mqa_attention_rotated`, `mqa_flash`.

The expert's attention reads the raw (or already rotated) qkv GEMM output and both K/V sources
(the prefix's cache, the action tokens' own) in one kernel; the prefix's flash attention keeps
no score matrix in memory (triton_attention.py on CUDA). The CPU references are the eager code's
masked softmax (softmax.py) between two float32 GEMMs.
"""

import torch

from lamp_ros.kernels.operators.softmax import masked_softmax_reference
from lamp_ros.kernels.rotate_half import rotate


# log2(e): the attention kernels' softmax works in powers of 2, so their scores are scaled by
# scale * LOG2E; premade_linear_rope may put that factor into q already
# (ExpertKernels: q_scale = head_dim^-0.5 * LOG2E, the attention's scale 1 / LOG2E)
LOG2E = 1.4426950408889634


def _triton_attention():
    from lamp_ros.kernels import triton_attention
    return triton_attention


@torch.library.custom_op('lamp::mqa_attention', mutates_args=())
def mqa_attention(qkv: torch.Tensor, k_prefix: torch.Tensor, v_prefix: torch.Tensor,
                  cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor, heads: int,
                  scale: float, tiles: list[int]) -> torch.Tensor:
    """The action tokens' multi-query attention from the raw qkv GEMM output (b, n,
    (heads + 2) * d): q and the tokens' own k rotated by cos/sin (b, n, d/2), keys = the
    rotated prefix K (b, T, [1,] d) then the tokens' k, values likewise, `mask` (b, n, T + n)
    bool with the eager code's finite fill -> (b, n, heads * d)."""
    if qkv.is_cuda:
        return _triton_attention().mqa_attention(qkv, k_prefix, v_prefix, cos, sin, mask,
                                                 heads, scale, tiles)
    return mqa_attention_reference(qkv, k_prefix, v_prefix, cos, sin, mask, heads, scale)


def mqa_attention_reference(qkv, k_prefix, v_prefix, cos, sin, mask, heads, scale):
    b, n, _ = qkv.shape
    d = k_prefix.shape[-1]
    q, k, v = qkv.float().split([heads * d, d, d], dim=-1)
    q = rotate(q.reshape(b, n, heads, d), cos, sin)
    k = rotate(k.reshape(b, n, 1, d), cos, sin).reshape(b, n, d)
    keys = torch.cat([k_prefix.float().reshape(b, -1, d), k], dim=1)
    values = torch.cat([v_prefix.float().reshape(b, -1, d), v], dim=1)
    return _folded_attention(q, keys, values, mask, heads, scale).to(qkv.dtype)


def _folded_attention(q, keys, values, mask, heads, scale):
    """Every head of q (b, n, heads, d) as one query row against one K/V head (b, m, d), the
    eager code's masked softmax between, in float32 -> (b, n, heads * d)."""
    b, n, _, d = q.shape
    probs = masked_softmax_reference(q.float().reshape(b, n * heads, d)
                                     @ keys.float().transpose(1, 2), mask, heads, scale)
    return (probs.float() @ values.float()).reshape(b, n, heads * d)


@mqa_attention.register_fake
def _(qkv, k_prefix, v_prefix, cos, sin, mask, heads, scale, tiles):
    return qkv.new_empty((qkv.shape[0], qkv.shape[1], heads * k_prefix.shape[-1]))


@torch.library.custom_op('lamp::mqa_attention_rotated', mutates_args=())
def mqa_attention_rotated(qkv: torch.Tensor, k_prefix: torch.Tensor, v_prefix: torch.Tensor,
                          mask: torch.Tensor, heads: int, scale: float,
                          tiles: list[int]) -> torch.Tensor:
    """mqa_attention of a qkv whose q and own k are already rotated (premade_linear_rope's
    output; q may carry part of the scale, the rest is `scale`): keys = the prefix K (b, T,
    [1,] d) then the tokens' k, values likewise -> (b, n, heads * d)."""
    if qkv.is_cuda:
        return _triton_attention().mqa_attention_rotated(qkv, k_prefix, v_prefix, mask,
                                                         heads, scale, tiles)
    return mqa_attention_rotated_reference(qkv, k_prefix, v_prefix, mask, heads, scale)


def mqa_attention_rotated_reference(qkv, k_prefix, v_prefix, mask, heads, scale):
    b, n, _ = qkv.shape
    d = k_prefix.shape[-1]
    q, k, v = qkv.float().split([heads * d, d, d], dim=-1)
    keys = torch.cat([k_prefix.float().reshape(b, -1, d), k], dim=1)
    values = torch.cat([v_prefix.float().reshape(b, -1, d), v], dim=1)
    return _folded_attention(q.reshape(b, n, heads, d), keys, values, mask, heads,
                             scale).to(qkv.dtype)


@mqa_attention_rotated.register_fake
def _(qkv, k_prefix, v_prefix, mask, heads, scale, tiles):
    return qkv.new_empty((qkv.shape[0], qkv.shape[1], heads * k_prefix.shape[-1]))


@torch.library.custom_op('lamp::mqa_flash', mutates_args=())
def mqa_flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
              heads: int, scale: float, tiles: list[int]) -> torch.Tensor:
    """Flash attention of rotated q (b, n, heads, d) against one K/V head k, v (b, T, [1,] d)
    under `mask` (b, n, T) bool with the eager code's finite fill -> (b, n, heads * d): the
    prefix's attention without its score matrix in memory."""
    if q.is_cuda:
        return _triton_attention().mqa_flash(q, k, v, mask, heads, scale, tiles)
    return mqa_flash_reference(q, k, v, mask, heads, scale)


def mqa_flash_reference(q, k, v, mask, heads, scale):
    b, _, _, d = q.shape
    return _folded_attention(q, k.reshape(b, -1, d), v.reshape(b, -1, d), mask, heads,
                             scale).to(q.dtype)


@mqa_flash.register_fake
def _(q, k, v, mask, heads, scale, tiles):
    return q.new_empty((q.shape[0], q.shape[1], heads * q.shape[-1]))
