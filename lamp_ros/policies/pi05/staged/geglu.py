"""GeGLU: the Gemma layers' MLP, in the stage precision or (fp8_prefix_mlp) with FP8 linears.

gate and up read the same input, so they are one FanOut (one GEMM once merged); on the kernel
path the GeGLU is one kernel, which for an FP8 down_proj also writes the FP8 rows it reads.
"""

import torch
from torch import nn
from torch.nn import functional as F

from lamp_ros.kernels import operators as kernel_ops
from lamp_ros.kernels.linears import Fp8Linear
from lamp_ros.policies.pi05.staged.fan_out import FanOut


class GeGLU(nn.Module):
    """down(gelu_tanh(gate(x)) * up(x)) with gate/up in one FanOut."""

    def __init__(self, in_proj: FanOut, down_proj: nn.Linear):
        super().__init__()
        self.in_proj = in_proj
        self.down_proj = down_proj
        self.kernel = False

    def hidden(self, x: torch.Tensor, pdl: int = 0) -> torch.Tensor:
        """gelu_tanh(gate(x)) * up(x): what down_proj reads (pdl: the kernel's
        dependent-launch mode)."""
        p = self.in_proj(x)
        if self.kernel:
            return kernel_ops.geglu(p['gate'], p['up'], pdl)
        return F.gelu(p['gate'], approximate='tanh') * p['up']

    @property
    def fp8(self) -> bool:
        """down_proj is an Fp8Linear: the hidden layer goes to it as FP8 rows, made in the same
        pass as the GeGLU (never stored in the stage precision)."""
        return isinstance(self.down_proj, Fp8Linear)

    @property
    def fp8_in(self) -> bool:
        """gate/up are Fp8Linears too: the MLP can start from quantised input rows."""
        return all(isinstance(lin, Fp8Linear) for lin in self.in_proj.linears())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.fp8:
            return self.down_proj(self.hidden(x))
        return self._fp8_down(self.in_proj(x), x.dtype)

    def from_rows(self, codes: torch.Tensor, row_scale: torch.Tensor, dtype) -> torch.Tensor:
        """forward of input rows already quantised (fp8 and fp8_in)."""
        return self._fp8_down(self.in_proj.from_rows(codes, row_scale, dtype), dtype)

    def _fp8_down(self, p: dict, dtype) -> torch.Tensor:
        rows = kernel_ops.geglu_fp8 if self.kernel else kernel_ops.geglu_fp8_reference
        return self.down_proj.from_rows(*rows(p['gate'], p['up']), dtype)
