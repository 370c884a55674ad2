"""The pi0.5-shaped model: vision encoder, prefix LM writing a KV cache, flow-matching expert.

Three `nn.Module`s, one per pipeline stage, each with a tensor-in / tensor-out `forward` so that
`torch.export` can capture every stage on its own:

- `VisionEncoder`: camera images -> image tokens (siglip.py).
- `PrefixEncoder`: [image tokens, text tokens] with a prefix-LM mask -> per-layer K/V cache.
- `ActionExpert`: noise + KV cache -> action chunk, by `num_steps` Euler steps of the learned
  velocity field from t=1 (noise) to t=0, each step attending to the prefix cache.

Shapes follow openpi (`src/openpi/models/pi0.py` with `pi05=True`); `b` is the batch.
"""

import math

import torch
from torch import nn
from torch.nn import functional as F

from lamp_ros.policies.pi05.config import Pi05Config
from lamp_ros.policies.pi05.gemma import (AdaRMSNorm, ExpertLayer, GemmaLayer, make_attention_mask,
                                          RMSNorm)
from lamp_ros.policies.pi05.siglip import VisionEncoder
from lamp_ros.policies.pi05 import rtc


def assemble_prefix(image_tokens, image_mask, text, token_mask):
    """[image tokens, text embeddings] -> (x (b, T, w), prefix_mask (b, T), attention mask
    (b, T, T), positions (b, T)). pi0.5: the whole prefix is one bidirectional block."""
    b, cams, patches, w = image_tokens.shape
    x = torch.cat([image_tokens.reshape(b, cams * patches, w).to(text.dtype), text], dim=1)
    img_token_mask = image_mask[:, :, None].expand(b, cams, patches).reshape(b, -1)
    prefix_mask = torch.cat([img_token_mask, token_mask], dim=1)
    attn_mask = make_attention_mask(prefix_mask, torch.zeros_like(prefix_mask))
    positions = torch.cumsum(prefix_mask.long(), dim=1) - 1
    return x, prefix_mask, attn_mask, positions


class PrefixEncoder(nn.Module):
    """Gemma prefix over [image tokens, text tokens]; returns what the expert reads: K, V, mask."""

    def __init__(self, cfg: Pi05Config):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.llm.width)
        self.layers = nn.ModuleList(GemmaLayer(cfg.llm) for _ in range(cfg.llm.depth))
        # Gemma's final norm: part of the model; only the KV cache leaves the prefix.
        self.final_norm = RMSNorm(cfg.llm.width, cfg.llm.eps)

    def forward(self, image_tokens, image_mask, token_ids, token_mask):
        """image_tokens (b, cams, patches, w), image_mask (b, cams) bool, token_ids (b, L) int,
        token_mask (b, L) bool -> k_cache, v_cache (depth, b, T, kv_heads, d), prefix_mask (b, T).
        """
        text = self.embed(token_ids) * math.sqrt(self.cfg.llm.width)
        x, prefix_mask, attn_mask, positions = assemble_prefix(image_tokens, image_mask, text,
                                                               token_mask)
        ks, vs = [], []
        for layer in self.layers:
            h = layer.input_norm(x)
            q, k, v = layer.attn.qkv(h, positions)
            ks.append(k)
            vs.append(v)
            x = x + layer.attn.attend(q, k, v, attn_mask)
            x = x + layer.mlp(layer.post_attn_norm(x))
        x = self.final_norm(x)  # unused downstream: the prototype computes it, passes remove it
        return torch.stack(ks), torch.stack(vs), prefix_mask


def posemb_sincos(t: torch.Tensor, dim: int, min_period: float = 4e-3,
                  max_period: float = 4.0) -> torch.Tensor:
    """Sine-cosine embedding of the flow time t (b,) or (b, n) -> (..., dim), as in openpi."""
    fraction = torch.linspace(0.0, 1.0, dim // 2, dtype=torch.float32, device=t.device)
    period = min_period * (max_period / min_period) ** fraction
    angle = t.float()[..., None] * (2 * math.pi / period)
    return torch.cat([angle.sin(), angle.cos()], dim=-1)


def suffix_attention(prefix_mask: torch.Tensor, horizon: int):
    """(mask (b, horizon, T + horizon), positions (b, horizon)) of the action tokens: they see
    every valid prefix token and each other (one new causal block), positioned after the
    prefix's valid tokens."""
    b = prefix_mask.shape[0]
    suffix = torch.ones(b, horizon, dtype=torch.bool, device=prefix_mask.device)
    mask = torch.cat([prefix_mask[:, None, :].expand(b, horizon, -1),
                      suffix[:, None, :].expand(b, horizon, -1)], dim=2)
    positions = prefix_mask.long().sum(-1, keepdim=True) + torch.arange(
        horizon, device=prefix_mask.device)[None, :]
    return mask, positions


class ActionExpert(nn.Module):
    """Gemma-300M-shaped expert with adaRMS time conditioning; integrates the flow with Euler."""

    def __init__(self, cfg: Pi05Config):
        super().__init__()
        self.cfg = cfg
        w = cfg.expert.width
        self.action_in_proj = nn.Linear(cfg.action_dim, w)
        self.time_mlp_in = nn.Linear(w, w)
        self.time_mlp_out = nn.Linear(w, w)
        self.layers = nn.ModuleList(ExpertLayer(cfg.expert) for _ in range(cfg.expert.depth))
        self.final_norm = AdaRMSNorm(w, cfg.expert.eps)
        self.action_out_proj = nn.Linear(w, cfg.action_dim)

    def time_condition(self, t: torch.Tensor) -> torch.Tensor:
        emb = posemb_sincos(t, self.cfg.expert.width).to(self.time_mlp_in.weight.dtype)
        return F.silu(self.time_mlp_out(F.silu(self.time_mlp_in(emb))))

    def velocity(self, x_t, t, k_cache, v_cache, prefix_mask):
        """One evaluation of the velocity field v(x_t, t | prefix) -> (b, horizon, action_dim);
        t (b,), or (b, horizon) for a flow time per action (training.py's delayed prefix)."""
        horizon = x_t.shape[1]
        cond = self.time_condition(t)
        x = self.action_in_proj(x_t)
        mask, positions = suffix_attention(prefix_mask, horizon)
        for i, layer in enumerate(self.layers):
            h, gate = layer.input_norm(x, cond)
            q, k, v = layer.attn.qkv(h, positions)
            k_all = torch.cat([k_cache[i], k], dim=1)
            v_all = torch.cat([v_cache[i], v], dim=1)
            x = x + layer.attn.attend(q, k_all, v_all, mask) * gate
            h, gate = layer.post_attn_norm(x, cond)
            x = x + layer.mlp(h) * gate
        h, _ = self.final_norm(x, cond)
        return self.action_out_proj(h)

    def forward(self, k_cache, v_cache, prefix_mask, noise, committed=None, delay=None):
        """noise (b, horizon, action_dim) at t=1 -> actions at t=0 (normalised, padded).
        With `committed` (b, horizon, action_dim) and `delay` (an integer tensor): the first
        `delay` actions are the committed ones, the rest generated around them (real-time
        chunking, trained mode: rtc.py)."""
        dt = -1.0 / self.cfg.num_steps
        x_t = noise.to(self.action_in_proj.weight.dtype)
        batch, horizon = x_t.shape[:2]
        fixed = None if committed is None else rtc.committed_mask(delay, horizon, x_t.device)
        if fixed is not None:
            x_t = rtc.start(x_t, committed, fixed)
        for step in range(self.cfg.num_steps):
            if fixed is None:
                t = torch.full((batch,), 1.0 + step * dt, device=x_t.device)
            else:
                t = rtc.flow_times(fixed, 1.0 + step * dt, batch)
            x_t = x_t + dt * self.velocity(x_t, t, k_cache, v_cache, prefix_mask)
            if fixed is not None:
                x_t = rtc.put_back(x_t, committed, fixed)
        return x_t.float()  # float32 to the host stages whatever the model's precision


class Pi05Model(nn.Module):
    """The three model stages together; `sample_actions` is the eager model path."""

    def __init__(self, cfg: Pi05Config):
        super().__init__()
        self.cfg = cfg
        self.vision = VisionEncoder(cfg.vision, cfg.llm.width, len(cfg.camera_slots))
        self.prefix = PrefixEncoder(cfg)
        self.expert = ActionExpert(cfg)

    def sample_actions(self, images, image_mask, token_ids, token_mask, noise):
        """uint8 images (b, cams, H, W, 3) -> normalised actions (b, horizon, action_dim)."""
        tokens = self.vision(images)
        k_cache, v_cache, prefix_mask = self.prefix(tokens, image_mask, token_ids, token_mask)
        return self.expert(k_cache, v_cache, prefix_mask, noise)
