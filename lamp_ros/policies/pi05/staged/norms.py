"""The norms of the passes' form: unit norms after fold_norm_affine, per-step adaRMS tables.

fold_norm_affine moves a norm's affine into the linears that read it, so what stays is the bare
normalisation (`UnitRMSNorm`, `UnitLayerNorm`); precompute_time_conditioning leaves the adaRMS
norms a table of each Euler step's modulation (`StepAdaRMSNorm`). Each has a kernel switch the
cuda lowering turns on; `add_then_norm` is where a residual add joins the norm's kernel.
"""

import torch
from torch import nn

from lamp_ros.kernels import operators as kernel_ops


class UnitRMSNorm(nn.Module):
    """x / rms(x) in float32: an RMSNorm whose (1 + weight) now lives in the next linears."""

    CENTER = False

    def __init__(self, eps: float):
        super().__init__()
        self.eps = eps
        self.kernel = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        norm = kernel_ops.rms_norm if self.kernel else kernel_ops.rms_norm_reference
        return norm(x, None, None, self.eps)


class UnitLayerNorm(UnitRMSNorm):
    """(x - mean) / std in float32: a LayerNorm whose gamma and beta now live in the next
    linears (nn.LayerNorm without affine, with a kernel switch)."""

    CENTER = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        norm = kernel_ops.layer_norm if self.kernel else kernel_ops.layer_norm_reference
        return norm(x, self.eps)


def add_then_norm(norm: nn.Module, x: torch.Tensor, pending) -> tuple:
    """(x + pending, norm(x + pending)): a residual branch's output added where its sum is
    normed (pending None: nothing left to add). Unit norms on the kernel path do both in one
    kernel (`lamp::add_norm`); the stages carry a branch whose GEMM cannot take the residual in
    its epilogue (a bias epilogue, torch._scaled_mm) to the next norm this way."""
    if pending is None:
        return x, norm(x)
    if isinstance(norm, UnitRMSNorm) and norm.kernel:
        return kernel_ops.add_norm(x, pending, norm.eps, norm.CENTER)
    x = x + pending
    return x, norm(x)


class StepAdaRMSNorm(nn.Module):
    """adaRMS with the modulation of each Euler step precomputed: table (steps + 1, 3 * width),
    the last row for flow time 0 (real-time chunking's committed actions)."""

    def __init__(self, eps: float, table: torch.Tensor):
        super().__init__()
        self.eps = eps
        self.register_buffer('table', table)
        self.kernel = False

    def forward(self, x: torch.Tensor, step, pdl: int = 0):
        """-> (normed x, the residual gate); pdl: the kernel's dependent-launch mode. `step`:
        the Euler step, or (step, fixed (1, horizon) bool): a modulation per action, the
        fixed ones at flow time 0 (the reference math only: the kernel takes one row)."""
        if isinstance(step, tuple):
            step, fixed = step
            rows = torch.where(fixed[..., None], self.table[-1], self.table[step])
            scale, shift, gate = rows.chunk(3, dim=-1)
            return kernel_ops.rms_norm_reference(x, scale, shift, self.eps), gate
        scale, shift, gate = self.table[step].chunk(3)
        if self.kernel:
            return kernel_ops.rms_norm(x, scale, shift, self.eps, pdl), gate.view(1, 1, -1)
        return kernel_ops.rms_norm_reference(x, scale, shift, self.eps), gate.view(1, 1, -1)
