"""Layers of the optimised model stages: the form every graph pass reads and rewrites.

The eager policy's layers (policies/gemma.py, siglip.py) fix which projections exist and call
them by name; passes need one shape that can also say "q/k/v are one GEMM now", "this norm has
no affine any more" or "this layer only makes K/V". So the stages are lowered (lower.py) into
these layers, which compute exactly what the originals compute until a pass changes them:

- `FanOut`: linears that read the same input, each making one or more named outputs; merged,
  one linear makes them all and the result is split.
- `UnitRMSNorm`: RMSNorm whose (1 + weight) scale was folded into the linears it feeds.
- `StepAdaRMSNorm`: adaRMS whose scale/shift/gate come from a table indexed by Euler step.
- `Rotary`: RoPE, computed from positions, or looked up in folded cos/sin tables.
"""

import torch
from torch import nn
from torch.nn import functional as F

from lamp_ros.policies import gemma


def proj_name(names) -> str:
    """Attribute name of a linear making `names`: q_proj, qkv_proj, gate_up_proj."""
    short = all(len(n) == 1 for n in names)
    return ('' if short else '_').join(names) + '_proj'


class FanOut(nn.Module):
    """Linears reading one input -> {output name: tensor}; a linear may make several outputs."""

    def __init__(self, parts):
        """parts: [(names, sizes, nn.Linear)], the linear's rows being those outputs in order."""
        super().__init__()
        self.parts = []
        for names, sizes, linear in parts:
            if sum(sizes) != linear.out_features or len(names) != len(sizes):
                raise ValueError(f'FanOut: {names} of sizes {sizes} from {linear}')
            self.add_module(proj_name(names), linear)
            self.parts.append((proj_name(names), tuple(names), tuple(sizes)))

    def forward(self, x: torch.Tensor) -> dict:
        out = {}
        for attr, names, sizes in self.parts:
            y = getattr(self, attr)(x)
            out.update(zip(names, y.split(sizes, dim=-1)) if len(names) > 1 else {names[0]: y})
        return out

    def linears(self) -> list:
        return [getattr(self, attr) for attr, _, _ in self.parts]

    def rows(self) -> list:
        """[(name, size, linear, first row)] for every output."""
        out = []
        for attr, names, sizes in self.parts:
            start = 0
            for name, size in zip(names, sizes):
                out.append((name, size, getattr(self, attr), start))
                start += size
        return out

    @torch.no_grad()
    def select(self, names, merge: bool) -> 'FanOut':
        """A FanOut making only `names` (in this order): one linear if `merge`, else one each."""
        rows = {name: (size, lin, start) for name, size, lin, start in self.rows()}
        groups = [list(names)] if merge else [[n] for n in names]
        parts = []
        for group in groups:
            weight = torch.cat([rows[n][1].weight[rows[n][2]:rows[n][2] + rows[n][0]]
                                for n in group])
            biases = [rows[n][1].bias for n in group]
            linear = nn.Linear(weight.shape[1], weight.shape[0], bias=biases[0] is not None,
                               device=weight.device, dtype=weight.dtype)
            linear.weight.copy_(weight)
            if linear.bias is not None:
                linear.bias.copy_(torch.cat([b[rows[n][2]:rows[n][2] + rows[n][0]]
                                             for n, b in zip(group, biases)]))
            parts.append((tuple(group), tuple(rows[n][0] for n in group), linear))
        return FanOut(parts)

    @property
    def names(self) -> tuple:
        return tuple(n for _, names, _ in self.parts for n in names)


class UnitRMSNorm(nn.Module):
    """x / rms(x) in float32: an RMSNorm whose (1 + weight) now lives in the next linears."""

    def __init__(self, eps: float):
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


class StepAdaRMSNorm(nn.Module):
    """adaRMS with the modulation of each Euler step precomputed: table (steps, 3 * width)."""

    def __init__(self, eps: float, table: torch.Tensor):
        super().__init__()
        self.eps = eps
        self.register_buffer('table', table)

    def forward(self, x: torch.Tensor, step: int):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        scale, shift, gate = self.table[step].view(1, 1, -1).chunk(3, dim=-1)
        return (xf * (1.0 + scale.float()) + shift.float()).to(x.dtype), gate


class Rotary(nn.Module):
    """RoPE on (b, n, heads, d) from integer positions (b, n); tables once folded."""

    def __init__(self, head_dim: int, base: float):
        super().__init__()
        self.half, self.base, self.first = head_dim // 2, base, 0
        self.register_buffer('cos', None)
        self.register_buffer('sin', None)

    def fold(self, first: int, last: int, device=None) -> None:
        """Tabulate cos/sin for positions first..last with the very ops `gemma.rope` runs,
        on the device the stage runs on (a CPU table in a GPU graph would not export)."""
        freq = self.base ** (-torch.arange(self.half, dtype=torch.float32, device=device)
                             / self.half)
        angle = torch.arange(first, last + 1, device=device).float()[:, None] * freq
        self.cos, self.sin, self.first = angle.cos(), angle.sin(), first

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        if self.cos is None:
            return gemma.rope(x, positions, self.base)
        index = positions - self.first
        cos = self.cos.float()[index][:, :, None, :]
        sin = self.sin.float()[index][:, :, None, :]
        x1, x2 = x.float()[..., :self.half], x.float()[..., self.half:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)


class Attention(nn.Module):
    """Multi-query attention over a FanOut of q/k/v (or k/v only: the layer makes K/V only)."""

    def __init__(self, cfg, in_proj: FanOut, o_proj):
        super().__init__()
        self.cfg = cfg
        self.in_proj = in_proj
        self.o_proj = o_proj
        self.fused = False  # fuse_attention: one scaled_dot_product_attention call

    def project(self, x: torch.Tensor, positions: torch.Tensor, rotary: Rotary) -> dict:
        """{'q': (b, n, heads, d), 'k', 'v': (b, n, kv_heads, d)}, q and k rotated."""
        b, n, _ = x.shape
        c = self.cfg
        heads = {'q': c.num_heads, 'k': c.num_kv_heads, 'v': c.num_kv_heads}
        out = {}
        for name, y in self.in_proj(x).items():
            y = y.reshape(b, n, heads[name], c.head_dim)
            out[name] = y if name == 'v' else rotary(y, positions)
        return out

    def attend(self, q, k, v, mask: torch.Tensor) -> torch.Tensor:
        if not self.fused:
            # The eager layer's own code (it only reads self.o_proj): the same math.
            return gemma.Attention.attend(self, q, k, v, mask)
        b, n, heads, d = q.shape
        groups = heads // k.shape[2]
        qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if groups > 1:  # the shared K/V head, broadcast to every query head
            kh, vh = kh.repeat_interleave(groups, 1), vh.repeat_interleave(groups, 1)
        # An additive mask with the eager code's finite fill: a fully masked row (a padding
        # query) gets a uniform softmax, as there, instead of NaN.
        bias = torch.zeros(mask.shape, dtype=q.dtype, device=q.device)
        bias = bias.masked_fill(~mask, torch.finfo(q.dtype).min)[:, None]
        out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=bias)
        return self.o_proj(out.transpose(1, 2).reshape(b, n, heads * d))


class GeGLU(nn.Module):
    """down(gelu_tanh(gate(x)) * up(x)) with gate/up in one FanOut."""

    def __init__(self, in_proj: FanOut, down_proj: nn.Linear):
        super().__init__()
        self.in_proj = in_proj
        self.down_proj = down_proj

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.in_proj(x)
        return self.down_proj(F.gelu(p['gate'], approximate='tanh') * p['up'])


class DecoderLayer(nn.Module):
    """Gemma layer of the prefix or the expert; `mlp is None` marks a K/V-only layer."""

    def __init__(self, input_norm, attn: Attention, post_attn_norm, mlp):
        super().__init__()
        self.input_norm = input_norm
        self.attn = attn
        self.post_attn_norm = post_attn_norm
        self.mlp = mlp

    @property
    def kv_only(self) -> bool:
        return self.mlp is None

    def norm_readers(self) -> list:
        """[(norm attribute, linears reading its output)]: where a norm's affine can go."""
        out = [('input_norm', self.attn.in_proj.linears())]
        if not self.kv_only:
            out.append(('post_attn_norm', self.mlp.in_proj.linears()))
        return out


class VisionBlock(nn.Module):
    """Pre-norm ViT block: x + attn(ln(x)); x + mlp(ln(x)), q/k/v in one FanOut."""

    def __init__(self, num_heads: int, norm1, attn_in: FanOut, out_proj, norm2, fc1, fc2):
        super().__init__()
        self.num_heads = num_heads
        self.norm1, self.attn_in, self.out_proj = norm1, attn_in, out_proj
        self.norm2, self.fc1, self.fc2 = norm2, fc1, fc2

    def norm_readers(self) -> list:
        return [('norm1', self.attn_in.linears()), ('norm2', [self.fc1])]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, w = x.shape
        p = self.attn_in(self.norm1(x))
        # (b, n, w) -> (b, heads, n, head_dim)
        q, k, v = (p[name].reshape(b, n, self.num_heads, -1).transpose(1, 2) for name in 'qkv')
        a = F.scaled_dot_product_attention(q, k, v)
        x = x + self.out_proj(a.transpose(1, 2).reshape(b, n, w))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x)), approximate='tanh'))
