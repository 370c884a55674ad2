"""Gemma building blocks shared by the prefix LM and the action expert.

RMSNorm with the Gemma `(1 + weight)` scale, its adaptive variant (adaRMS: scale, shift and a
residual gate computed from the flow-matching time), rotary position embeddings, multi-query
attention projections and the GeGLU MLP. Norms compute in float32 as Gemma does.
"""

import torch
from torch import nn
from torch.nn import functional as F

from lamp_ros.kernels.rotate_half import rotate
from lamp_ros.policies.pi05.config import GemmaConfig


class RMSNorm(nn.Module):
    """Gemma RMSNorm: x / rms(x) * (1 + weight), computed in float32."""

    def __init__(self, width: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * (1.0 + self.weight.float())).to(x.dtype)


class AdaRMSNorm(nn.Module):
    """adaRMS (pi0.5): RMS-normalise, then scale/shift from the condition; also return a gate."""

    def __init__(self, width: int, eps: float):
        super().__init__()
        self.eps = eps
        self.modulation = nn.Linear(width, 3 * width)

    def forward(self, x: torch.Tensor, cond: torch.Tensor):
        """x (b, n, w); cond (b, w), one flow time for all tokens, or (b, n, w), one per token
        (real-time chunking's training: the committed actions are clean, the rest are not)."""
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        modulation = self.modulation(cond)
        if modulation.dim() == 2:
            modulation = modulation.unsqueeze(1)
        scale, shift, gate = modulation.chunk(3, dim=-1)
        return (xf * (1.0 + scale.float()) + shift.float()).to(x.dtype), gate


def rope_angles(positions: torch.Tensor, half: int, base: float) -> torch.Tensor:
    """RoPE angles (..., half) of integer positions (...), in float32."""
    freq = base ** (-torch.arange(half, dtype=torch.float32, device=positions.device) / half)
    return positions.float()[..., None] * freq


def rope(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """Rotary embedding on (b, n, heads, head_dim) with integer positions (b, n)."""
    angle = rope_angles(positions, x.shape[-1] // 2, base)  # (b, n, half)
    return rotate(x, angle.cos(), angle.sin())


class Attention(nn.Module):
    """Multi-query attention projections (8 query heads share 1 KV head in pi0.5)."""

    def __init__(self, cfg: GemmaConfig):
        super().__init__()
        self.cfg = cfg
        self.q_proj = nn.Linear(cfg.width, cfg.num_heads * cfg.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.width, cfg.num_kv_heads * cfg.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.width, cfg.num_kv_heads * cfg.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.num_heads * cfg.head_dim, cfg.width, bias=False)

    def qkv(self, x: torch.Tensor, positions: torch.Tensor):
        """Return q (b, n, heads, d) and RoPE'd k, v (b, n, kv_heads, d)."""
        b, n, _ = x.shape
        c = self.cfg
        q = self.q_proj(x).view(b, n, c.num_heads, c.head_dim)
        k = self.k_proj(x).view(b, n, c.num_kv_heads, c.head_dim)
        v = self.v_proj(x).view(b, n, c.num_kv_heads, c.head_dim)
        return rope(q, positions, c.rope_base), rope(k, positions, c.rope_base), v

    def attend(self, q, k, v, mask: torch.Tensor) -> torch.Tensor:
        """q (b, n, H, d) over k, v (b, m, K, d) with a boolean mask (b, n, m) -> (b, n, width)."""
        b, n, heads, d = q.shape
        groups = heads // k.shape[2]
        k = k.repeat_interleave(groups, dim=2)
        v = v.repeat_interleave(groups, dim=2)
        logits = torch.einsum('bnhd,bmhd->bhnm', q, k).float() * d ** -0.5
        # A finite fill keeps fully masked rows (padding queries) free of NaN.
        logits = logits.masked_fill(~mask[:, None], torch.finfo(torch.float32).min)
        probs = logits.softmax(-1).to(v.dtype)
        out = torch.einsum('bhnm,bmhd->bnhd', probs, v).reshape(b, n, heads * d)
        return self.o_proj(out)


class GeGLU(nn.Module):
    """Gemma MLP: down(gelu_tanh(gate(x)) * up(x))."""

    def __init__(self, cfg: GemmaConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.width, cfg.mlp_dim, bias=False)
        self.up_proj = nn.Linear(cfg.width, cfg.mlp_dim, bias=False)
        self.down_proj = nn.Linear(cfg.mlp_dim, cfg.width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.gelu(self.gate_proj(x), approximate='tanh') * self.up_proj(x))


class GemmaLayer(nn.Module):
    """Prefix LM layer: plain RMSNorm residual blocks."""

    def __init__(self, cfg: GemmaConfig):
        super().__init__()
        self.input_norm = RMSNorm(cfg.width, cfg.eps)
        self.attn = Attention(cfg)
        self.post_attn_norm = RMSNorm(cfg.width, cfg.eps)
        self.mlp = GeGLU(cfg)


class ExpertLayer(nn.Module):
    """Action-expert layer: adaRMS-conditioned norms with gated residuals."""

    def __init__(self, cfg: GemmaConfig):
        super().__init__()
        self.input_norm = AdaRMSNorm(cfg.width, cfg.eps)
        self.attn = Attention(cfg)
        self.post_attn_norm = AdaRMSNorm(cfg.width, cfg.eps)
        self.mlp = GeGLU(cfg)


def make_attention_mask(input_mask: torch.Tensor, ar_mask: torch.Tensor) -> torch.Tensor:
    """openpi's prefix-LM mask: token i sees j when cumsum(ar)[j] <= cumsum(ar)[i], both valid.

    `ar_mask` is 1 where a token starts a new causal block; all-zero means fully bidirectional.
    """
    blocks = torch.cumsum(ar_mask.long(), dim=-1)
    causal = blocks[:, None, :] <= blocks[:, :, None]
    valid = input_mask[:, None, :] & input_mask[:, :, None]
    return causal & valid
