"""Rotary: RoPE as the passes' form runs it, computed or (fold_constants) looked up in tables.

The cos/sin rows depend only on positions, so one call per stage can make what every layer
reads (`prepare`); on the kernel path q and k of a layer rotate in one launch.
"""

import torch
from torch import nn

from lamp_ros.kernels import operators as kernel_ops
from lamp_ros.policies.pi05 import gemma


class Rotary(nn.Module):
    """RoPE on (b, n, heads, d) from integer positions (b, n); tables once folded."""

    def __init__(self, head_dim: int, base: float):
        super().__init__()
        self.half, self.base, self.first = head_dim // 2, base, 0
        self.register_buffer('cos', None)
        self.register_buffer('sin', None)
        self.kernel = False

    def tables(self, positions: torch.Tensor) -> tuple:
        """cos/sin rows (b, n, d/2) of these positions: looked up once folded, else computed."""
        if self.cos is None:
            angle = gemma.rope_angles(positions, self.half, self.base)
            return angle.cos(), angle.sin()
        index = positions - self.first
        return self.cos.float()[index], self.sin.float()[index]

    def prepare(self, positions: torch.Tensor):
        """What `rotate` reads, computed once per stage call: the positions, or with the kernel
        on, the cos/sin rows of these positions that every layer shares."""
        return self.tables(positions) if self.kernel else positions

    def rotate(self, x: torch.Tensor, prepared) -> torch.Tensor:
        if not self.kernel:
            return self(x, prepared)
        return kernel_ops.rope(x, *prepared)

    def rotate_qk(self, q: torch.Tensor, k: torch.Tensor, prepared) -> tuple:
        """q and k of the same tokens rotated; on the kernel path in one launch."""
        if not self.kernel:
            return self(q, prepared), self(k, prepared)
        return kernel_ops.rope_qk(q, k, *prepared)

    def fold(self, first: int, last: int, device=None) -> None:
        """Tabulate cos/sin for positions first..last with the very ops `gemma.rope` runs,
        on the device the stage runs on (a CPU table in a GPU graph would not export)."""
        angle = gemma.rope_angles(torch.arange(first, last + 1, device=device), self.half,
                                  self.base)
        self.cos, self.sin, self.first = angle.cos(), angle.sin(), first

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        if self.cos is None:
            return gemma.rope(x, positions, self.base)
        return gemma.rotate(x, *self.tables(positions))
