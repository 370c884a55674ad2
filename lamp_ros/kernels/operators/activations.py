"""`lamp::geglu`: gelu_tanh(gate) * up in one pass (three kernels in eager PyTorch).

Its reference is also the GeGLU of the fused operators' references (fp8.py, expert_gemms.py,
premade_gemms.py).
"""

import torch
from torch.nn import functional as F

from lamp_ros.kernels.operators.lazy_triton import load_triton_kernels as _triton


@torch.library.custom_op('lamp::geglu', mutates_args=())
def geglu(gate: torch.Tensor, up: torch.Tensor, pdl: int = 0) -> torch.Tensor:
    """gelu_tanh(gate) * up for two (..., m) tensors (views of one merged GEMM are fine); pdl
    as rms_norm's."""
    if gate.is_cuda:
        return _triton().geglu(gate, up, pdl=pdl)
    return geglu_reference(gate, up)


def geglu_reference(gate, up):
    return F.gelu(gate, approximate='tanh') * up


@geglu.register_fake
def _(gate, up, pdl=0):
    return torch.empty(gate.shape, dtype=gate.dtype, device=gate.device)
