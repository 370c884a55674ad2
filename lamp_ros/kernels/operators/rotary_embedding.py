"""`lamp::rope`, `lamp::rope_qk`: rotate-half RoPE from gathered cos/sin tables.

The cos/sin rows are gathered once per stage call and every q/k rotation reads them: one launch
where eager PyTorch runs a dozen (triton_kernels.py on CUDA; the CPU reference is the eager
models' own kernels/rotate_half.py).
"""

import torch

from lamp_ros.kernels.operators.lazy_triton import load_triton_kernels as _triton
from lamp_ros.kernels.rotate_half import rotate


@torch.library.custom_op('lamp::rope', mutates_args=())
def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (b, n, heads, d) rotated by cos/sin (b, n, d/2) float32 -> contiguous, x's dtype."""
    if x.is_cuda:
        return _triton().rope(x, cos, sin)
    return rope_reference(x, cos, sin)


rope_reference = rotate  # the eager models' own code


@rope.register_fake
def _(x, cos, sin):
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


@torch.library.custom_op('lamp::rope_qk', mutates_args=())
def rope_qk(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor,
            sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q (b, n, heads, d) and k (b, n, kv_heads, d) of the same tokens rotated in one launch."""
    if q.is_cuda:
        return _triton().rope(q, cos, sin, k)
    return rope_reference(q, cos, sin), rope_reference(k, cos, sin)


@rope_qk.register_fake
def _(q, k, cos, sin):
    return (torch.empty(q.shape, dtype=q.dtype, device=q.device),
            torch.empty(k.shape, dtype=k.dtype, device=k.device))
