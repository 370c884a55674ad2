"""PatchLinear: the vision's patch-embedding convolution as one GEMM (patch_embed_as_gemm)."""

import math

import torch
from torch import nn
from torch.nn import functional as F


class PatchLinear(nn.Module):
    """The vision's patch embedding (Conv2d with stride = kernel, no padding) as one GEMM.

    Such a convolution is a linear map of each patch's pixels, so the (H, W, C) pixels are cut
    into patches by a reshape and a transpose (no arithmetic), each patch flattened in (row,
    column, channel) order, and multiplied by the conv weight laid out the same way. The conv
    bias and the learned position table are both added per (patch, channel), so they are one
    table. The pixels stay channels-last as the cameras give them (the conv wanted NCHW).
    A patch's length (14 * 14 * 3 = 588) is padded with zeros to a multiple of 8, so that each
    bf16 row starts 16-byte aligned: cuBLAS runs unaligned rows on slower kernels, slower than
    the zero pad and the aligned GEMM together (docs/notebook/)."""

    ALIGN = 8

    def __init__(self, weight: torch.Tensor, table: torch.Tensor, patch: int, channels: int):
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)  # (width, padded patch length)
        self.table = nn.Parameter(table, requires_grad=False)  # (patches, width)
        # plain ints, so that the exported graph's shapes are constants
        self.patch, self.channels = patch, channels
        self.side = math.isqrt(table.shape[0])  # patches along a side of the square image
        self.length = patch * patch * channels  # a patch's values before the zero pad
        self.padded = weight.shape[1]  # and after it

    @classmethod
    @torch.no_grad()
    def from_conv(cls, conv: nn.Conv2d, pos_embed: torch.Tensor) -> 'PatchLinear':
        p = conv.kernel_size[0]
        if (conv.kernel_size != (p, p) or conv.stride != (p, p) or conv.padding != (0, 0)
                or conv.dilation != (1, 1) or conv.groups != 1):
            raise ValueError(f'PatchLinear: {conv} is not a patch embedding (stride = kernel, '
                             'no padding, dilation or groups)')
        weight = conv.weight.permute(0, 2, 3, 1).reshape(conv.out_channels, -1)
        weight = F.pad(weight, (0, -weight.shape[1] % cls.ALIGN)).contiguous()
        table = pos_embed.float() + (0 if conv.bias is None else conv.bias.float())
        if table.shape[0] != math.isqrt(table.shape[0]) ** 2:
            raise ValueError(f'PatchLinear: {table.shape[0]} patches do not tile a square image')
        return cls(weight, table.to(pos_embed.dtype), p, conv.in_channels)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """images (N, H, W, C) -> (N, patches, width)."""
        p, side = self.patch, self.side
        patches = images.reshape(-1, side, p, side, p, self.channels).transpose(2, 3)
        patches = patches.reshape(-1, side * side, self.length)
        if self.padded != self.length:
            patches = F.pad(patches, (0, self.padded - self.length))
        return F.linear(patches, self.weight) + self.table
