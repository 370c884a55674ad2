"""The normed GEMMs as plain weight streams (triton_premade.py), and the ops that premake them.

The kernel that writes x also writes what the next adaRMS-normed GEMM reads: xm = x * mod
(rounded to x's dtype) and `pieces` (P, rows) float32, piece j the sum of squares of x's rows
over column block j (x as stored). The GEMM then needs no prologue: rstd from the pieces'
sum, the rest as ada_linear / ada_geglu (expert_gemms.py). `lamp::norm_pieces` and
`gated_linear_prep` make (xm, pieces); `premade_linear`, `premade_linear_rope` and
`premade_geglu` read them.
"""

import torch

from lamp_ros.kernels.operators.activations import geglu_reference
from lamp_ros.kernels.operators.expert_gemms import gated_linear_reference
from lamp_ros.kernels.operators.lazy_triton import load_triton_expert_gemm as _triton_expert_gemm
from lamp_ros.kernels.rotate_half import rotate


def _triton_premade():
    from lamp_ros.kernels import triton_premade
    return triton_premade


def _pieces_reference(x, pieces: int) -> torch.Tensor:
    xf = x.float().reshape(-1, x.shape[-1])
    return xf.pow(2).reshape(xf.shape[0], pieces, -1).sum(-1).t().contiguous()


def _premade_out(x, mod, pieces: int):
    return (x.float() * mod.float()).to(x.dtype), _pieces_reference(x, pieces)


def _pieces_fake(x, pieces: int):
    rows = x.numel() // x.shape[-1]
    return x.new_empty((pieces, rows), dtype=torch.float32)


@torch.library.custom_op('lamp::norm_pieces', mutates_args=())
def norm_pieces(x: torch.Tensor, mod: torch.Tensor, pieces: int,
                pdl: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(x * mod, pieces) of an x no gated GEMM made (the expert's first layer)."""
    if x.is_cuda:
        return _triton_premade().norm_pieces(x, mod, pieces, pdl=pdl)
    return _premade_out(x, mod, pieces)


@norm_pieces.register_fake
def _(x, mod, pieces, pdl=0):
    return torch.empty_like(x, memory_format=torch.contiguous_format), _pieces_fake(x, pieces)


@torch.library.custom_op('lamp::gated_linear_prep', mutates_args=())
def gated_linear_prep(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor,
                      gate: torch.Tensor | None, mod_next: torch.Tensor, tiles: list[int],
                      counters: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """gated_linear, and from the same epilogue its output's (x * mod_next, pieces) for the
    normed GEMM after it: one piece per column block of the tiling (N / tiles[1])."""
    if x.is_cuda:
        return _triton_expert_gemm().expert_gemm(x, weight, tiles, counters=counters,
                                                 residual=residual, gate=gate,
                                                 mod_next=mod_next)
    y = gated_linear_reference(x, weight, residual, gate)
    return (y, *_premade_out(y, mod_next, weight.shape[0] // tiles[1]))


@gated_linear_prep.register_fake
def _(x, weight, residual, gate, mod_next, tiles, counters):
    y = torch.empty_like(residual, memory_format=torch.contiguous_format)
    return y, torch.empty_like(y), _pieces_fake(y, weight.shape[0] // tiles[1])


def _premade_projection(xm, pieces, weight, bias, eps):
    """rstd * (xm @ W^T) + bias in float32, rstd from the pieces (ada_linear's math)."""
    sumsq = pieces.float().sum(0).reshape(*xm.shape[:-1], 1)
    rstd = torch.rsqrt(sumsq / xm.shape[-1] + eps)
    return rstd * (xm.float() @ weight.float().t()) + bias.float()


@torch.library.custom_op('lamp::premade_linear', mutates_args=())
def premade_linear(xm: torch.Tensor, pieces: torch.Tensor, weight: torch.Tensor,
                   bias: torch.Tensor, eps: float, tiles: list[int]) -> torch.Tensor:
    """ada_linear of the x whose (x * mod, pieces) the kernel before made -> (..., N)."""
    if xm.is_cuda:
        return _triton_premade().premade_gemm(xm, pieces, weight, bias, eps, tiles)
    return premade_linear_reference(xm, pieces, weight, bias, eps)


def premade_linear_reference(xm, pieces, weight, bias, eps):
    return _premade_projection(xm, pieces, weight, bias, eps).to(xm.dtype)


@premade_linear.register_fake
def _(xm, pieces, weight, bias, eps, tiles):
    return xm.new_empty((*xm.shape[:-1], weight.shape[0]))


@torch.library.custom_op('lamp::premade_linear_rope', mutates_args=())
def premade_linear_rope(xm: torch.Tensor, pieces: torch.Tensor, weight: torch.Tensor,
                        bias: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, heads: int,
                        q_scale: float, eps: float, tiles: list[int]) -> torch.Tensor:
    """premade_linear of a q/k/v weight (heads + 2 heads of d) whose epilogue also rotates q
    and k by cos/sin (b, n, d/2) and scales q by q_scale, rounded once -> (b, n, (heads + 2) *
    d): what mqa_attention_rotated reads."""
    if xm.is_cuda:
        return _triton_premade().premade_gemm(xm, pieces, weight, bias, eps, tiles,
                                              rope=(cos, sin, heads, q_scale))
    return premade_linear_rope_reference(xm, pieces, weight, bias, cos, sin, heads, q_scale,
                                         eps)


def premade_linear_rope_reference(xm, pieces, weight, bias, cos, sin, heads, q_scale, eps):
    y = _premade_projection(xm, pieces, weight, bias, eps)
    b, n = cos.shape[:2]
    d = weight.shape[0] // (heads + 2)
    y = y.reshape(b, n, heads + 2, d)
    q = rotate(y[:, :, :heads], cos.float(), sin.float()) * q_scale
    k = rotate(y[:, :, heads:heads + 1], cos.float(), sin.float())
    return torch.cat([q, k, y[:, :, heads + 1:]], dim=2).reshape(*xm.shape[:-1], -1) \
        .to(xm.dtype)


@premade_linear_rope.register_fake
def _(xm, pieces, weight, bias, cos, sin, heads, q_scale, eps, tiles):
    return xm.new_empty((*xm.shape[:-1], weight.shape[0]))


@torch.library.custom_op('lamp::premade_geglu', mutates_args=())
def premade_geglu(xm: torch.Tensor, pieces: torch.Tensor, w_gate: torch.Tensor,
                  w_up: torch.Tensor, bias_gate: torch.Tensor, bias_up: torch.Tensor,
                  eps: float, tiles: list[int]) -> torch.Tensor:
    """ada_geglu of the x whose (x * mod, pieces) the kernel before made -> (..., F)."""
    if xm.is_cuda:
        return _triton_premade().premade_gemm(xm, pieces, w_gate, bias_gate, eps, tiles,
                                              weight2=w_up, bias2=bias_up)
    return premade_geglu_reference(xm, pieces, w_gate, w_up, bias_gate, bias_up, eps)


def premade_geglu_reference(xm, pieces, w_gate, w_up, bias_gate, bias_up, eps):
    gate = _premade_projection(xm, pieces, w_gate, bias_gate, eps)
    up = _premade_projection(xm, pieces, w_up, bias_up, eps)
    return geglu_reference(gate, up).to(xm.dtype)


@premade_geglu.register_fake
def _(xm, pieces, w_gate, w_up, bias_gate, bias_up, eps, tiles):
    return xm.new_empty((*xm.shape[:-1], w_gate.shape[0]))
