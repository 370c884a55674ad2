"""The three model stages in the passes' form: same inputs, outputs and math as the eager ones.

Each forward mirrors its eager twin line by line (siglip.VisionEncoder, pi05.PrefixEncoder,
pi05.ActionExpert) with the switches passes flip: a missing final norm, K/V-only layers, a
folded embedding scale, precomputed time conditioning, a folded Euler update. Flipped or not,
the stage keeps its signature, so the graph node, the export and the runtime never notice. The
one exception is not a pass: the device letterbox (compiler/device_letterbox.py) has the vision
stage take the cameras' frames and their tables instead of letterboxed pixels, and rewrites the
graph node's inputs with it.
"""

import math

import torch
from torch import nn
from torch.nn import functional as F

from lamp_ros.policies.pi05.staged.norms import add_then_norm
from lamp_ros.policies.pi05.staged.patch_linear import PatchLinear
from lamp_ros.kernels import operators as kernel_ops
from lamp_ros.policies.pi05 import rtc
from lamp_ros.policies.pi05.model import assemble_prefix, posemb_sincos, suffix_attention
from lamp_ros.policies.pi05.siglip import to_model_range, VisionEncoder


def attention_bias(layers, mask: torch.Tensor, dtype):
    """The fused attentions' additive mask, made once for all layers of a stage call (None when
    no layer attends fused: they read the boolean mask)."""
    fused = [layer.attn for layer in layers if layer.attn.needs_bias]
    return fused[0].mask_bias(mask, dtype) if fused else None


class VisionStage(nn.Module):
    """uint8 images (..., H, W, 3) -> tokens (..., num_patches, out_width); with `letterbox`
    on, the cameras' flat frames and their tables (ops/letterbox.py) instead of the images."""

    letterbox = False  # set on a copy by compiler/device_letterbox.py

    def __init__(self, cfg, patch_embed, pos_embed, blocks, post_norm, projector,
                 cameras: int = 1):
        super().__init__()
        self.cfg = cfg
        self.cameras = cameras  # images per call (the policy's camera slots)
        self.patch_embed = patch_embed
        self.pos_embed = pos_embed
        self.blocks = nn.ModuleList(blocks)
        self.post_norm = post_norm
        self.projector = projector

    def norm_readers(self) -> list:
        return [('post_norm', [self.projector])]

    def patches(self, images: torch.Tensor) -> torch.Tensor:
        """The eager encoder's own code over the same names, or, once patch_embed_as_gemm
        made the conv a `PatchLinear` (the positions in its table), that GEMM on the pixels
        as they come, channels last."""
        if not isinstance(self.patch_embed, PatchLinear):
            return VisionEncoder.patches(self, images)
        images = to_model_range(images.reshape(-1, *images.shape[-3:]))
        return self.patch_embed(images.to(self.patch_embed.weight.dtype))

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        if self.letterbox:  # (*frames, geometry): the pixels made on the stage's device
            images = kernel_ops.letterbox(list(inputs[:-1]), inputs[-1])
        else:
            (images,) = inputs
        # The eager encoder's math, each residual add carried to the norm that reads its sum
        # (VisionBlock.deferred): on the kernel path one kernel does both.
        lead = images.shape[:-3]
        x, pending = self.patches(images), None
        for block in self.blocks:
            x, pending = block.deferred(x, pending)
        _, h = add_then_norm(self.post_norm, x, pending)
        return self.projector(h).reshape(*lead, x.shape[1], -1)


class PrefixStage(nn.Module):
    """[image tokens, text tokens] -> K/V cache (depth, b, T, kv_heads, d) and prefix mask."""

    def __init__(self, cfg, embed, layers, final_norm, rotary):
        super().__init__()
        self.cfg = cfg
        self.embed = embed
        self.embed_scale = math.sqrt(cfg.llm.width)  # None once folded into the table
        self.layers = nn.ModuleList(layers)
        self.final_norm = final_norm  # None once removed: nothing reads it
        self.rotary = rotary

    def forward(self, image_tokens, image_mask, token_ids, token_mask):
        text = self.embed(token_ids)
        if self.embed_scale is not None:
            text = text * self.embed_scale
        x, prefix_mask, attn_mask, positions = assemble_prefix(image_tokens, image_mask, text,
                                                               token_mask)
        ks, vs = [], []
        rotation = self.rotary.prepare(positions)
        bias = attention_bias(self.layers, attn_mask, x.dtype)
        pending = None  # an MLP output still to be added to x (DecoderLayer.mlp_deferred)
        for layer in self.layers:
            x, h = add_then_norm(layer.input_norm, x, pending)
            p = layer.attn.project(h, rotation, self.rotary)
            ks.append(p['k'])
            vs.append(p['v'])
            if layer.kv_only:
                pending = None
                continue
            x, attended = layer.attend_deferred(x, p, attn_mask, bias)
            x, pending = layer.mlp_deferred(x, attended)
        if pending is not None:
            x = x + pending
        if self.final_norm is not None:
            x = self.final_norm(x)
        return torch.stack(ks), torch.stack(vs), prefix_mask


class ExpertStage(nn.Module):
    """noise + KV cache -> actions by `num_steps` Euler steps of the velocity field."""

    def __init__(self, cfg, action_in_proj, time_mlp_in, time_mlp_out, layers, final_norm,
                 action_out_proj, rotary):
        super().__init__()
        self.cfg = cfg
        self.action_in_proj = action_in_proj
        self.time_mlp_in = time_mlp_in    # both None once the conditioning is precomputed
        self.time_mlp_out = time_mlp_out
        self.register_buffer('time_embedding', None)  # (steps, width) once folded
        self.layers = nn.ModuleList(layers)
        self.final_norm = final_norm
        self.action_out_proj = action_out_proj  # scaled by dt once the Euler update is folded
        self.rotary = rotary
        self.euler_folded = False

    @property
    def dt(self) -> float:
        return -1.0 / self.cfg.num_steps

    @property
    def time_precomputed(self) -> bool:
        return self.time_mlp_in is None

    def norms(self) -> list:
        """[(owner, attribute)] of every adaRMS norm, in the order the velocity runs them."""
        pairs = [(layer, name) for layer in self.layers
                 for name in ('input_norm', 'post_attn_norm')]
        return pairs + [(self, 'final_norm')]

    def step_time(self, step: int, batch: int, device) -> torch.Tensor:
        return torch.full((batch,), 1.0 + step * self.dt, device=device)

    def time_condition(self, t: torch.Tensor) -> torch.Tensor:
        """The time MLP on flow times t (b,) or (b, horizon) -> (..., width)."""
        emb = posemb_sincos(t, self.cfg.expert.width).to(self.time_mlp_in.weight.dtype)
        return F.silu(self.time_mlp_out(F.silu(self.time_mlp_in(emb))))

    def condition(self, step: int, batch: int, device, fixed=None):
        """What the adaRMS norms read at `step`: the time condition, or the step itself. With
        `fixed` (1, horizon) (real-time chunking, rtc.py): one per action, the committed ones
        at flow time 0 (the tables' last row once folded)."""
        if self.time_precomputed:
            return step if fixed is None else (step, fixed)
        if self.time_embedding is None:
            t = self.step_time(step, batch, device) if fixed is None else \
                rtc.flow_times(fixed, 1.0 + step * self.dt, batch)
            return self.time_condition(t)
        if fixed is None:
            emb = self.time_embedding[step][None].expand(batch, -1)
        else:
            emb = torch.where(fixed[..., None], self.time_embedding[-1], self.time_embedding[step])
            emb = emb.expand(batch, -1, -1)
        emb = emb.to(self.time_mlp_in.weight.dtype)
        return F.silu(self.time_mlp_out(F.silu(self.time_mlp_in(emb))))

    def suffix(self, prefix_mask, horizon: int, dtype) -> tuple:
        """What every step's attention reads, made once per call: (mask, rotation, bias)."""
        mask, positions = suffix_attention(prefix_mask, horizon)
        return mask, self.rotary.prepare(positions), attention_bias(self.layers, mask, dtype)

    def velocity(self, x_t, cond, k_cache, v_cache, suffix):
        """v(x_t, t | prefix), times dt once the Euler update is folded."""
        mask, rotation, bias = suffix
        x = self.action_in_proj(x_t)
        carry = None  # what a fused layer made for the next one's premade qkv
        for i, layer in enumerate(self.layers):
            # the kernel lowering's fused layer; its kernels read one modulation row per step,
            # so a modulation per action (real-time chunking) runs the layer's parts instead
            if layer.expert_kernels is not None and not isinstance(cond, tuple):
                following = self.layers[i + 1].expert_kernels if i + 1 < len(self.layers) \
                    else None
                x, carry = layer.expert_kernels.step(layer, x, cond, k_cache[i], v_cache[i],
                                                     mask, rotation, carry, following)
                continue
            carry = None
            h, gate = layer.input_norm(x, cond)
            p = layer.attn.project(h, rotation, self.rotary)
            p['k'] = torch.cat([k_cache[i], p['k']], dim=1)
            p['v'] = torch.cat([v_cache[i], p['v']], dim=1)
            x = layer.attend_add(x, p, mask, bias, gate)
            h, gate = layer.post_attn_norm(x, cond)
            x = layer.mlp_add(x, h, gate)
        h, _ = self.final_norm(x, cond)
        return self.action_out_proj(h)

    def forward(self, k_cache, v_cache, prefix_mask, noise, committed=None, delay=None):
        x_t = noise.to(self.action_in_proj.weight.dtype)
        suffix = self.suffix(prefix_mask, x_t.shape[1], x_t.dtype)
        fixed = None if committed is None else \
            rtc.committed_mask(delay, x_t.shape[1], x_t.device)
        if fixed is not None:
            x_t = rtc.start(x_t, committed, fixed)
        for step in range(self.cfg.num_steps):
            cond = self.condition(step, x_t.shape[0], x_t.device, fixed)
            v = self.velocity(x_t, cond, k_cache, v_cache, suffix)
            x_t = x_t + v if self.euler_folded else x_t + self.dt * v
            if fixed is not None:
                x_t = rtc.put_back(x_t, committed, fixed)
        return x_t.float()  # float32 to the host stages, as the eager expert
