"""Layers of the optimised model stages: the form every graph pass reads and rewrites.

The eager policy's layers (policies/pi05/gemma.py, siglip.py) fix which projections exist and call
them by name; passes need one shape that can also say "q/k/v are one GEMM now", "this norm has
no affine any more" or "this layer only makes K/V". So the stages are lowered (lower.py) into
these layers, which compute exactly what the originals compute until a pass changes them (the
linears a pass or the cuda lowering swaps in, FP8, (in, out) weights, stored cuBLASLt
algorithms, are kernels/linears.py's):

- `FanOut`: linears that read the same input, each making one or more named outputs; merged,
  one linear makes them all and the result is split.
- `UnitRMSNorm`: RMSNorm whose (1 + weight) scale was folded into the linears it feeds;
  `UnitLayerNorm` the same for a LayerNorm's gamma and beta.
- `StepAdaRMSNorm`: adaRMS whose scale/shift/gate come from a table indexed by Euler step.
- `Rotary`: RoPE, computed from positions, or looked up in folded cos/sin tables.
- `PatchLinear`: a stride = kernel Conv2d patch embedding as one GEMM over unfolded patches.

Modules with a `kernel` switch run on lamp_ros's own operators when it is on (kernels/operators/:
one fused kernel per norm, RoPE, GeGLU; residual adds in the GEMM epilogue, or in the next
norm's kernel where the GEMM cannot take them: `add_then_norm`), and an expert
layer given `ExpertKernels` (expert_kernels.py) runs on the kernels the build measured fastest.
Only the cuda backend does either (policies/pi05/cuda_lowering.py), just before export; the CPU
artifacts export these modules to ONNX, which knows no `lamp::` operators.
"""

import math

import torch
from torch import nn
from torch.nn import functional as F

from lamp_ros.kernels import operators as kernel_ops
from lamp_ros.kernels.linears import Fp8Linear
from lamp_ros.policies.pi05 import gemma


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
        return self._named(lambda linear: linear(x))

    def from_rows(self, codes: torch.Tensor, row_scale: torch.Tensor, dtype) -> dict:
        """forward of input rows already quantised for Fp8Linears (every linear is one)."""
        return self._named(lambda linear: linear.from_rows(codes, row_scale, dtype))

    def _named(self, run) -> dict:
        out = {}
        for attr, names, sizes in self.parts:
            y = run(getattr(self, attr))
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
    """adaRMS with the modulation of each Euler step precomputed: table (steps, 3 * width)."""

    def __init__(self, eps: float, table: torch.Tensor):
        super().__init__()
        self.eps = eps
        self.register_buffer('table', table)
        self.kernel = False

    def forward(self, x: torch.Tensor, step: int, pdl: int = 0):
        """-> (normed x, the residual gate); pdl: the kernel's dependent-launch mode."""
        scale, shift, gate = self.table[step].chunk(3)
        if self.kernel:
            return kernel_ops.rms_norm(x, scale, shift, self.eps, pdl), gate.view(1, 1, -1)
        return kernel_ops.rms_norm_reference(x, scale, shift, self.eps), gate.view(1, 1, -1)


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


class Attention(nn.Module):
    """Multi-query attention over a FanOut of q/k/v (or k/v only: the layer makes K/V only)."""

    def __init__(self, cfg, in_proj: FanOut, o_proj):
        super().__init__()
        self.cfg = cfg
        self.in_proj = in_proj
        self.o_proj = o_proj
        self.fused = False  # fuse_attention: one scaled_dot_product_attention call
        self.kernel = False  # with one K/V head: two GEMMs around lamp::masked_softmax
        # ... or lamp::mqa_flash with these tiles, where it ran faster ([]: it did not; None:
        # not timed yet)
        self.flash_tiles = None

    def project(self, x: torch.Tensor, rotation, rotary: Rotary) -> dict:
        """{'q': (b, n, heads, d), 'k', 'v': (b, n, kv_heads, d)}, q and k rotated
        (`rotation` is what `rotary.prepare(positions)` made)."""
        b, n, _ = x.shape
        c = self.cfg
        heads = {'q': c.num_heads, 'k': c.num_kv_heads, 'v': c.num_kv_heads}
        out = {name: y.reshape(b, n, heads[name], c.head_dim)
               for name, y in self.in_proj(x).items()}
        if 'q' in out:
            out['q'], out['k'] = rotary.rotate_qk(out['q'], out['k'], rotation)
        else:  # a K/V-only layer
            out['k'] = rotary.rotate(out['k'], rotation)
        return out

    @property
    def folds_heads(self) -> bool:
        """One K/V head (pi0.5's MQA): all query heads attend as one long query sequence."""
        return self.cfg.num_kv_heads == 1

    @property
    def needs_bias(self) -> bool:
        """Whether `attention` reads the additive mask (the kernel path reads the boolean one)."""
        return self.fused and not (self.kernel and self.folds_heads)

    def mask_bias(self, mask: torch.Tensor, dtype) -> torch.Tensor:
        """The fused call's additive mask, made once per stage call from the boolean mask
        (b, n, m): 0 where seen, the eager code's finite fill elsewhere, so that a fully masked
        row (a padding query) gets a uniform softmax as there instead of NaN. (b, 1, n, m), or
        (b, 1, n * heads, m) when heads are folded (rows token-major, as q's memory is)."""
        bias = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
        bias = bias.masked_fill(~mask, torch.finfo(dtype).min)
        if self.folds_heads:
            bias = bias.repeat_interleave(self.cfg.num_heads, dim=1)
        return bias[:, None]

    def attend(self, q, k, v, mask: torch.Tensor, bias=None) -> torch.Tensor:
        if not self.fused:
            # The eager layer's own code (it only reads self.o_proj): the same math.
            return gemma.Attention.attend(self, q, k, v, mask)
        return self.o_proj(self.attention(q, k, v, mask, bias))

    def attention(self, q, k, v, mask: torch.Tensor, bias=None) -> torch.Tensor:
        """The fused attention before the output projection -> (b, n, heads * d)."""
        b, n, heads, d = q.shape
        if self.kernel and self.folds_heads and self.flash_tiles:
            return kernel_ops.mqa_flash(q, k, v, mask, heads, d ** -0.5, self.flash_tiles)
        if self.kernel and self.folds_heads:
            # Every head against the one K/V head is one GEMM (b, n * heads, d) x (b, d, m): a
            # fused attention kernel would get one (batch, head) of work and too few blocks for
            # the GPU at the expert's 50 queries. Then the eager code's masked softmax, one
            # kernel, and the second GEMM.
            scores = torch.matmul(q.reshape(b, n * heads, d), k.reshape(b, -1, d).transpose(1, 2))
            probs = kernel_ops.masked_softmax(scores, mask, heads, d ** -0.5)
            return torch.matmul(probs, v.reshape(b, -1, d)).reshape(b, n, heads * d)
        if bias is None:
            bias = self.mask_bias(mask, q.dtype)
        if self.folds_heads:
            # q (b, n, H, d) is already (b, 1, n * H, d) in memory; K/V are never repeated.
            out = F.scaled_dot_product_attention(q.reshape(b, 1, n * heads, d),
                                                 k.transpose(1, 2), v.transpose(1, 2),
                                                 attn_mask=bias)
            return out.reshape(b, n, heads * d)
        groups = heads // k.shape[2]
        qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if groups > 1:  # the shared K/V heads, broadcast to their query heads
            kh, vh = kh.repeat_interleave(groups, 1), vh.repeat_interleave(groups, 1)
        out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=bias)
        return out.transpose(1, 2).reshape(b, n, heads * d)


class PatchLinear(nn.Module):
    """The vision's patch embedding (Conv2d with stride = kernel, no padding) as one GEMM.

    Such a convolution is a linear map of each patch's pixels, so the (H, W, C) pixels are cut
    into patches by a reshape and a transpose (no arithmetic), each patch flattened in (row,
    column, channel) order, and multiplied by the conv weight laid out the same way. The conv
    bias and the learned position table are both added per (patch, channel), so they are one
    table. The pixels stay channels-last as the cameras give them (the conv wanted NCHW).
    A patch's length (14 * 14 * 3 = 588) is padded with zeros to a multiple of 8, so that each
    bf16 row starts 16-byte aligned: cuBLAS runs unaligned rows on slower kernels (on the H200
    15.6 us for the unaligned GEMM, 11.9 for the zero pad and the aligned one together)."""

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


def add_linear(residual: torch.Tensor, linear: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """residual + linear(x) as one GEMM whose epilogue adds the residual (cuBLAS beta = 1)."""
    if linear.bias is not None:
        return residual + linear(x)
    w = linear.weight
    out = torch.addmm(residual.reshape(-1, w.shape[0]), x.reshape(-1, w.shape[1]), w.t())
    return out.view(residual.shape)


class DecoderLayer(nn.Module):
    """Gemma layer of the prefix or the expert; `mlp is None` marks a K/V-only layer."""

    def __init__(self, input_norm, attn: Attention, post_attn_norm, mlp):
        super().__init__()
        self.input_norm = input_norm
        self.attn = attn
        self.post_attn_norm = post_attn_norm
        self.mlp = mlp
        self.kernel = False  # residual adds in GEMM epilogues / one addcmul for gated ones
        self.expert_kernels = None  # ExpertKernels (expert_kernels.py), set by the lowering

    @property
    def kv_only(self) -> bool:
        return self.mlp is None

    def attend_add(self, x, p: dict, mask, bias, gate=None) -> torch.Tensor:
        """x + attention output (times the adaRMS gate when given)."""
        if not (self.kernel and self.attn.fused):
            y = self.attn.attend(p['q'], p['k'], p['v'], mask, bias)
            return x + y if gate is None else x + y * gate
        a = self.attn.attention(p['q'], p['k'], p['v'], mask, bias)
        if gate is None:
            return add_linear(x, self.attn.o_proj, a)
        return torch.addcmul(x, self.attn.o_proj(a), gate)

    def mlp_add(self, x, h, gate=None) -> torch.Tensor:
        """x + mlp(h) (times the adaRMS gate when given)."""
        if not self.kernel:
            y = self.mlp(h)
            return x + y if gate is None else x + y * gate
        if gate is None:
            if self.mlp.fp8:  # torch._scaled_mm takes no residual
                return x + self.mlp(h)
            return add_linear(x, self.mlp.down_proj, self.mlp.hidden(h))
        return torch.addcmul(x, self.mlp(h), gate)

    @property
    def defers_attention_residual(self) -> bool:
        """The attention output is added to x by the kernel that norms the sum into the FP8
        rows of the MLP (`lamp::add_rms_norm_fp8`), not in the o GEMM's epilogue: for a 2-D
        residual torch's addmm first copies it into its output (on the H200 a 4 MB device copy,
        3.5 us, in each of the prefix's layers), and the fused norm reads it anyway."""
        norm = self.post_attn_norm
        return (self.kernel and self.attn.fused and not self.kv_only and self.mlp.fp8
                and self.mlp.fp8_in and isinstance(norm, UnitRMSNorm) and not norm.CENTER
                and norm.kernel)

    def attend_deferred(self, x, p: dict, mask, bias) -> tuple:
        """(x, attention output) where the MLP's norm adds them (defers_attention_residual),
        else (x + attention output, None)."""
        if not self.defers_attention_residual:
            return self.attend_add(x, p, mask, bias), None
        return x, self.attn.o_proj(self.attn.attention(p['q'], p['k'], p['v'], mask, bias))

    def mlp_deferred(self, x, pending=None) -> tuple:
        """(x, mlp(post_attn_norm(x))) with the add left to the next layer's input norm
        (add_then_norm) where the GEMM cannot take the residual (torch._scaled_mm, on the
        kernel path); else (x + mlp(post_attn_norm(x)), None). On that path, with gate/up in
        FP8 too, one kernel norms x and makes the FP8 rows they read (`lamp::rms_norm_fp8`):
        the normed rows are never stored. `pending`: the attention output still to be added
        to x (attend_deferred), which that kernel adds first (`lamp::add_rms_norm_fp8`)."""
        norm = self.post_attn_norm
        if pending is not None and not self.defers_attention_residual:
            x, pending = x + pending, None
        if not (self.kernel and self.mlp.fp8):
            return self.mlp_add(x, norm(x)), None
        if self.defers_attention_residual:
            if pending is None:
                codes, scale = kernel_ops.rms_norm_fp8(x, norm.eps)
            else:
                x, codes, scale = kernel_ops.add_rms_norm_fp8(x, pending, norm.eps)
            return x, self.mlp.from_rows(codes, scale, x.dtype)
        return x, self.mlp(norm(x))

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
        self.kernel = False  # the cuda lowering: fc1's GELU in its GEMM's epilogue

    def norm_readers(self) -> list:
        return [('norm1', self.attn_in.linears()), ('norm2', [self.fc1])]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x, pending = self.deferred(x, None)
        return x + pending

    def deferred(self, x: torch.Tensor, pending) -> tuple:
        """The block with its residual adds left to the norms that read their sums: takes and
        returns (x, a branch output still to be added to x; None: nothing). out_proj's and
        fc2's bias epilogues leave their GEMMs no room for the residual, so on the kernel path
        each add runs in the next norm's kernel (add_then_norm) instead of one of its own."""
        b, n, w = x.shape
        x, h = add_then_norm(self.norm1, x, pending)
        p = self.attn_in(h)
        # (b, n, w) -> (b, heads, n, head_dim)
        q, k, v = (p[name].reshape(b, n, self.num_heads, -1).transpose(1, 2) for name in 'qkv')
        a = F.scaled_dot_product_attention(q, k, v)
        x, h = add_then_norm(self.norm2, x, self.out_proj(a.transpose(1, 2).reshape(b, n, w)))
        return x, self.fc2(self.hidden(h))

    def hidden(self, h: torch.Tensor) -> torch.Tensor:
        """gelu_tanh(fc1(h)). On the kernel path on a GPU, one cuBLASLt GEMM whose epilogue
        adds the bias and applies the GELU (tanh form) to the float32 sums: no GELU kernel, no
        second round trip of the 4304-wide hidden layer (on the H200 15.7 us instead of 18.7
        per block; scripts/device/levers_probe.py). The CPU's `_addmm_activation` takes the
        erf GELU instead, so there the plain form stays."""
        if self.kernel and h.is_cuda and self.fc1.bias is not None:
            out = torch._addmm_activation(self.fc1.bias, h.reshape(-1, h.shape[-1]),
                                          self.fc1.weight.t(), use_gelu=True)
            return out.view(*h.shape[:-1], out.shape[-1])
        return F.gelu(self.fc1(h), approximate='tanh')
