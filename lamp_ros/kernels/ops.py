"""The `lamp::*` torch operators: one fused kernel each on CUDA, plain torch on the CPU.

The CPU implementations are the specification: the same float32 math as the passes' modules
(compiler/passes/modules.py), so a stage switched onto these operators computes what it did
before, and tests on the CPU check the switch. The CUDA implementations call the Triton kernels
(triton_kernels.py, imported on first use so that CPU-only machines never need Triton). The fake
implementations give torch.export the output shapes, and the exported program names the
operator: whoever loads a program that uses them imports this module first.
"""

import torch
from torch.nn import functional as F

from lamp_ros.policies.gemma import rotate


def _triton():
    from lamp_ros.kernels import triton_kernels
    return triton_kernels


# ---- rms_norm: x / rms(x) [* (1 + scale) + shift], float32 inside, x's dtype out ----

@torch.library.custom_op('lamp::rms_norm', mutates_args=())
def rms_norm(x: torch.Tensor, scale: torch.Tensor | None, shift: torch.Tensor | None,
             eps: float) -> torch.Tensor:
    """Unit RMSNorm over the last dim; with `scale`/`shift` (width,) the adaRMS modulation."""
    if x.is_cuda:
        return _triton().rms_norm(x, scale, shift, eps)
    return rms_norm_reference(x, scale, shift, eps)


def rms_norm_reference(x, scale, shift, eps):
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if scale is not None:
        xf = xf * (1.0 + scale.float()) + shift.float()
    return xf.to(x.dtype)


@rms_norm.register_fake
def _(x, scale, shift, eps):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


# ---- rope: rotate-half RoPE from gathered cos/sin tables ----

@torch.library.custom_op('lamp::rope', mutates_args=())
def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (b, n, heads, d) rotated by cos/sin (b, n, d/2) float32 -> contiguous, x's dtype."""
    if x.is_cuda:
        return _triton().rope(x, cos, sin)
    return rope_reference(x, cos, sin)


rope_reference = rotate  # the policy's own code


@rope.register_fake
def _(x, cos, sin):
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


# ---- geglu: gelu_tanh(gate) * up ----

@torch.library.custom_op('lamp::geglu', mutates_args=())
def geglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """gelu_tanh(gate) * up for two (..., m) tensors (views of one merged GEMM are fine)."""
    if gate.is_cuda:
        return _triton().geglu(gate, up)
    return geglu_reference(gate, up)


def geglu_reference(gate, up):
    return F.gelu(gate, approximate='tanh') * up


@geglu.register_fake
def _(gate, up):
    return torch.empty(gate.shape, dtype=gate.dtype, device=gate.device)


# ---- masked_softmax: the attention probabilities of the eager code, heads folded into rows ----

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


OPERATORS = ('lamp::rms_norm', 'lamp::rope', 'lamp::geglu', 'lamp::masked_softmax')
