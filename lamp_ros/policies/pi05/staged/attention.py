"""Attention: the Gemma layers' multi-query attention, eager, fused or on lamp's kernels.

Its q/k/v come from a FanOut (merged, or K/V only in a K/V-only layer); fuse_attention switches
it to one scaled_dot_product_attention call, and the cuda lowering, for pi0.5's one K/V head,
to GEMMs around `lamp::masked_softmax` or `lamp::mqa_flash`, whichever the build GPU ran faster.
"""

import torch
from torch import nn
from torch.nn import functional as F

from lamp_ros.kernels import operators as kernel_ops
from lamp_ros.policies.pi05 import gemma
from lamp_ros.policies.pi05.staged.fan_out import FanOut
from lamp_ros.policies.pi05.staged.rotary import Rotary


class Attention(nn.Module):
    """Multi-query attention over a FanOut of q/k/v (or k/v only: the layer makes K/V only)."""

    def __init__(self, cfg, in_proj: FanOut, o_proj):
        super().__init__()
        self.cfg = cfg
        self.in_proj = in_proj
        self.o_proj = o_proj
        self.fused = False  # fuse_attention: one scaled_dot_product_attention call
        self.kernel = False  # with one K/V head: two GEMMs around lamp::masked_softmax
        # ... or lamp::mqa_flash with these tiles, where it ran faster ([]: it did not; None:
        # not timed yet)
        self.flash_tiles = None

    def project(self, x: torch.Tensor, rotation, rotary: Rotary) -> dict:
        """{'q': (b, n, heads, d), 'k', 'v': (b, n, kv_heads, d)}, q and k rotated
        (`rotation` is what `rotary.prepare(positions)` made)."""
        b, n, _ = x.shape
        c = self.cfg
        heads = {'q': c.num_heads, 'k': c.num_kv_heads, 'v': c.num_kv_heads}
        out = {name: y.reshape(b, n, heads[name], c.head_dim)
               for name, y in self.in_proj(x).items()}
        if 'q' in out:
            out['q'], out['k'] = rotary.rotate_qk(out['q'], out['k'], rotation)
        else:  # a K/V-only layer
            out['k'] = rotary.rotate(out['k'], rotation)
        return out

    @property
    def folds_heads(self) -> bool:
        """One K/V head (pi0.5's MQA): all query heads attend as one long query sequence."""
        return self.cfg.num_kv_heads == 1

    @property
    def needs_bias(self) -> bool:
        """Whether `attention` reads the additive mask (the kernel path reads the boolean one)."""
        return self.fused and not (self.kernel and self.folds_heads)

    def mask_bias(self, mask: torch.Tensor, dtype) -> torch.Tensor:
        """The fused call's additive mask, made once per stage call from the boolean mask
        (b, n, m): 0 where seen, the eager code's finite fill elsewhere, so that a fully masked
        row (a padding query) gets a uniform softmax as there instead of NaN. (b, 1, n, m), or
        (b, 1, n * heads, m) when heads are folded (rows token-major, as q's memory is)."""
        bias = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
        bias = bias.masked_fill(~mask, torch.finfo(dtype).min)
        if self.folds_heads:
            bias = bias.repeat_interleave(self.cfg.num_heads, dim=1)
        return bias[:, None]

    def attend(self, q, k, v, mask: torch.Tensor, bias=None) -> torch.Tensor:
        if not self.fused:
            # The eager layer's own code (it only reads self.o_proj): the same math.
            return gemma.Attention.attend(self, q, k, v, mask)
        return self.o_proj(self.attention(q, k, v, mask, bias))

    def attention(self, q, k, v, mask: torch.Tensor, bias=None) -> torch.Tensor:
        """The fused attention before the output projection -> (b, n, heads * d)."""
        b, n, heads, d = q.shape
        if self.kernel and self.folds_heads and self.flash_tiles:
            return kernel_ops.mqa_flash(q, k, v, mask, heads, d ** -0.5, self.flash_tiles)
        if self.kernel and self.folds_heads:
            # Every head against the one K/V head is one GEMM (b, n * heads, d) x (b, d, m): a
            # fused attention kernel would get one (batch, head) of work and too few blocks for
            # the GPU at the expert's 50 queries. Then the eager code's masked softmax, one
            # kernel, and the second GEMM.
            scores = torch.matmul(q.reshape(b, n * heads, d), k.reshape(b, -1, d).transpose(1, 2))
            probs = kernel_ops.masked_softmax(scores, mask, heads, d ** -0.5)
            return torch.matmul(probs, v.reshape(b, -1, d)).reshape(b, n, heads * d)
        if bias is None:
            bias = self.mask_bias(mask, q.dtype)
        if self.folds_heads:
            # q (b, n, H, d) is already (b, 1, n * H, d) in memory; K/V are never repeated.
            out = F.scaled_dot_product_attention(q.reshape(b, 1, n * heads, d),
                                                 k.transpose(1, 2), v.transpose(1, 2),
                                                 attn_mask=bias)
            return out.reshape(b, n, heads * d)
        groups = heads // k.shape[2]
        qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if groups > 1:  # the shared K/V heads, broadcast to their query heads
            kh, vh = kh.repeat_interleave(groups, 1), vh.repeat_interleave(groups, 1)
        out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=bias)
        return out.transpose(1, 2).reshape(b, n, heads * d)
