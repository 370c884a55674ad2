"""SigLIP-style vision encoder (So400m/14 in pi0.5) followed by the projection to the LLM width.

Written the way the Python prototype is: Conv2d patch embedding on NCHW, learned positions,
pre-norm transformer blocks with biased projections and a tanh-GELU MLP, a final LayerNorm, then
one Linear into the language model's embedding space (PaliGemma's multi-modal projector).
"""

import torch
from torch import nn
from torch.nn import functional as F

from lamp_ros.policies.pi05.config import VisionConfig


class VisionBlock(nn.Module):
    """Pre-norm ViT block: x + attn(ln(x)); x + mlp(ln(x))."""

    def __init__(self, cfg: VisionConfig):
        super().__init__()
        self.num_heads = cfg.num_heads
        self.norm1 = nn.LayerNorm(cfg.width, eps=cfg.eps)
        self.q_proj = nn.Linear(cfg.width, cfg.width)
        self.k_proj = nn.Linear(cfg.width, cfg.width)
        self.v_proj = nn.Linear(cfg.width, cfg.width)
        self.out_proj = nn.Linear(cfg.width, cfg.width)
        self.norm2 = nn.LayerNorm(cfg.width, eps=cfg.eps)
        self.fc1 = nn.Linear(cfg.width, cfg.mlp_dim)
        self.fc2 = nn.Linear(cfg.mlp_dim, cfg.width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, w = x.shape
        h = self.norm1(x)
        # (b, n, w) -> (b, heads, n, head_dim)
        q = self.q_proj(h).view(b, n, self.num_heads, -1).transpose(1, 2)
        k = self.k_proj(h).view(b, n, self.num_heads, -1).transpose(1, 2)
        v = self.v_proj(h).view(b, n, self.num_heads, -1).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v)
        x = x + self.out_proj(a.transpose(1, 2).reshape(b, n, w))
        h = self.norm2(x)
        return x + self.fc2(F.gelu(self.fc1(h), approximate='tanh'))


def to_model_range(images: torch.Tensor) -> torch.Tensor:
    """uint8 camera pixels -> float32 in [-1, 1], the range the encoder was trained on.

    It is the encoder's first operation rather than a host stage, so a compiled artifact maps
    the pixels on its own device: the host hands over one byte per channel (half of a bf16
    copy, a quarter of float32's) and converts nothing. uint8 only: float pixels would be
    ambiguous between [0, 255], [0, 1] and [-1, 1], and a silently wrong range still gives
    plausible actions."""
    if images.dtype != torch.uint8:
        raise ValueError(f'vision: camera pixels must be uint8 (0..255), got {images.dtype}')
    return images.to(torch.float32) * (2.0 / 255.0) - 1.0


class VisionEncoder(nn.Module):
    """uint8 images (..., H, W, 3) -> tokens (..., num_patches, out_width); `cameras`: how many
    images the policy encodes per call (its camera slots), which sets the GEMMs' rows."""

    def __init__(self, cfg: VisionConfig, out_width: int, cameras: int = 1):
        super().__init__()
        self.cfg = cfg
        self.cameras = cameras
        self.patch_embed = nn.Conv2d(3, cfg.width, cfg.patch_size, stride=cfg.patch_size)
        self.pos_embed = nn.Parameter(torch.zeros(cfg.num_patches, cfg.width))
        self.blocks = nn.ModuleList(VisionBlock(cfg) for _ in range(cfg.depth))
        self.post_norm = nn.LayerNorm(cfg.width, eps=cfg.eps)
        self.projector = nn.Linear(cfg.width, out_width)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        lead = images.shape[:-3]
        x = self.patches(images)
        for block in self.blocks:
            x = block(x)
        return self.projector(self.post_norm(x)).reshape(*lead, x.shape[1], -1)

    def patches(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 images (..., H, W, 3) -> patch embeddings with positions (N, patches, width)."""
        images = to_model_range(images.reshape(-1, *images.shape[-3:]))
        images = images.to(self.patch_embed.weight.dtype)
        x = self.patch_embed(images.permute(0, 3, 1, 2))  # NHWC -> NCHW for the conv
        return x.flatten(2).transpose(1, 2) + self.pos_embed
