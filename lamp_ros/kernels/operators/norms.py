"""`lamp::rms_norm`, `layer_norm`, `add_norm`: the norms, float32 inside, x's dtype out.

Eager PyTorch runs an RMSNorm as six element-wise kernels; each operator here is one pass over
the rows (triton_kernels.py on CUDA).
"""

import torch
from torch.nn import functional as F

from lamp_ros.kernels.operators.lazy_triton import load_triton_kernels as _triton


# ---- rms_norm: x / rms(x) [* (1 + scale) + shift], float32 inside, x's dtype out ----

@torch.library.custom_op('lamp::rms_norm', mutates_args=())
def rms_norm(x: torch.Tensor, scale: torch.Tensor | None, shift: torch.Tensor | None,
             eps: float, pdl: int = 0) -> torch.Tensor:
    """Unit RMSNorm over the last dim; with `scale`/`shift` (width,) the adaRMS modulation.
    pdl: programmatic dependent launch on the GPU (triton_kernels.grid_dependency)."""
    if x.is_cuda:
        return _triton().rms_norm(x, scale, shift, eps, pdl=pdl)
    return rms_norm_reference(x, scale, shift, eps)


def rms_norm_reference(x, scale, shift, eps):
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if scale is not None:
        xf = xf * (1.0 + scale.float()) + shift.float()
    return xf.to(x.dtype)


@rms_norm.register_fake
def _(x, scale, shift, eps, pdl=0):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


# ---- layer_norm / add_norm: the affine-free LayerNorm, and a residual add fused into a norm ----
# A residual add whose GEMM cannot take it in its epilogue (a bias epilogue already, or
# torch._scaled_mm) is otherwise a kernel of its own right before the norm that reads its sum:
# add_norm does both in one pass over the rows.

@torch.library.custom_op('lamp::layer_norm', mutates_args=())
def layer_norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    """LayerNorm over the last dim without affine (folded into the next linears)."""
    if x.is_cuda:
        return _triton().norm(x, eps, center=True)
    return layer_norm_reference(x, eps)


def layer_norm_reference(x, eps):
    return F.layer_norm(x.float(), x.shape[-1:], eps=eps).to(x.dtype)


@layer_norm.register_fake
def _(x, eps):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op('lamp::add_norm', mutates_args=())
def add_norm(x: torch.Tensor, residual: torch.Tensor, eps: float,
             center: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(s, norm(s)) for s = x + residual in x's dtype (rounded once, as the eager add): the
    LayerNorm without affine when `center`, else the unit RMSNorm."""
    if x.is_cuda:
        return _triton().norm(x, eps, residual=residual, center=center)
    return add_norm_reference(x, residual, eps, center)


def add_norm_reference(x, residual, eps, center):
    s = x + residual
    return s, (layer_norm_reference(s, eps) if center else rms_norm_reference(s, None, None, eps))


@add_norm.register_fake
def _(x, residual, eps, center):
    return (torch.empty_like(x, memory_format=torch.contiguous_format),
            torch.empty_like(x, memory_format=torch.contiguous_format))
