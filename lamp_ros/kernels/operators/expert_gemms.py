"""The action expert's fused GEMMs: `lamp::ada_linear`, `ada_geglu`, `gated_linear`.

Four of the expert layer's five kernels (triton_expert_gemm.py; the fifth is attention.py's):
the adaRMS norm folded into the GEMM, GeGLU of two weight streams, and the gated residual in
the epilogue. `tiles` are the kernels' block sizes: chosen per shape by kernels/tuning.py at
build time and recorded in the exported program; the CPU references ignore them. `counters`
(int32 zeros) is the split-K GEMMs' scratch: the kernel counts finished slices in it and leaves
it zero again, so to every caller it is an unchanged input (hence no `mutates_args`).
"""

import torch

from lamp_ros.kernels.operators.activations import geglu_reference
from lamp_ros.kernels.operators.lazy_triton import load_triton_expert_gemm as _triton_expert_gemm


def _ada_projection(x, weight, mod, bias, eps):
    """rstd(x) * ((x * mod) @ W^T) + bias in float32: adaRMS (scale = mod - 1) then a linear,
    the shift having been pushed through the linear into `bias` (shift @ W^T)."""
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return rstd * ((xf * mod.float()) @ weight.float().t()) + bias.float()


@torch.library.custom_op('lamp::ada_linear', mutates_args=())
def ada_linear(x: torch.Tensor, weight: torch.Tensor, mod: torch.Tensor, bias: torch.Tensor,
               eps: float, tiles: list[int], counters: torch.Tensor) -> torch.Tensor:
    """adaRMS-normalised x through a linear in one GEMM (the norm folded in; module doc of
    triton_expert_gemm.py): x (..., K), weight (N, K), mod (K,), bias (N,) -> (..., N)."""
    if x.is_cuda:
        return _triton_expert_gemm().expert_gemm(x, weight, tiles, counters=counters,
                                                 mod=mod, bias=bias, eps=eps)
    return ada_linear_reference(x, weight, mod, bias, eps)


def ada_linear_reference(x, weight, mod, bias, eps):
    return _ada_projection(x, weight, mod, bias, eps).to(x.dtype)


@ada_linear.register_fake
def _(x, weight, mod, bias, eps, tiles, counters):
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


@torch.library.custom_op('lamp::ada_geglu', mutates_args=())
def ada_geglu(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, mod: torch.Tensor,
              bias_gate: torch.Tensor, bias_up: torch.Tensor, eps: float,
              tiles: list[int], counters: torch.Tensor) -> torch.Tensor:
    """gelu_tanh(gate) * up of two `ada_linear`s of the same x, in one GEMM that streams both
    weights: the GeGLU MLP's hidden layer -> (..., F)."""
    if x.is_cuda:
        return _triton_expert_gemm().expert_gemm(x, w_gate, tiles, counters=counters,
                                                 weight2=w_up, mod=mod, bias=bias_gate,
                                                 bias2=bias_up, eps=eps)
    return ada_geglu_reference(x, w_gate, w_up, mod, bias_gate, bias_up, eps)


def ada_geglu_reference(x, w_gate, w_up, mod, bias_gate, bias_up, eps):
    gate = _ada_projection(x, w_gate, mod, bias_gate, eps)
    return geglu_reference(gate, _ada_projection(x, w_up, mod, bias_up, eps)).to(x.dtype)


@ada_geglu.register_fake
def _(x, w_gate, w_up, mod, bias_gate, bias_up, eps, tiles, counters):
    return x.new_empty((*x.shape[:-1], w_gate.shape[0]))


@torch.library.custom_op('lamp::gated_linear', mutates_args=())
def gated_linear(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor,
                 gate: torch.Tensor | None, tiles: list[int],
                 counters: torch.Tensor) -> torch.Tensor:
    """residual + gate * (x @ W^T) (gate (N,) per column, or none) in one GEMM's epilogue."""
    if x.is_cuda:
        return _triton_expert_gemm().expert_gemm(x, weight, tiles, counters=counters,
                                                 residual=residual, gate=gate)
    return gated_linear_reference(x, weight, residual, gate)


def gated_linear_reference(x, weight, residual, gate):
    y = x.float() @ weight.float().t()
    if gate is not None:
        y = y * gate.float()
    return (residual.float() + y).to(residual.dtype)


@gated_linear.register_fake
def _(x, weight, residual, gate, tiles, counters):
    return torch.empty_like(residual, memory_format=torch.contiguous_format)
