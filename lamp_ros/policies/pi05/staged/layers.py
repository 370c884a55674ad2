"""The layers of the passes' form: the Gemma decoder layer and the SigLIP vision block.

A layer decides where its residual adds run: in the GEMM's epilogue (`add_linear`), in the next
norm's kernel where the GEMM cannot take them (add_then_norm, `lamp::add_rms_norm_fp8`), or as a
plain add off the kernel path, so that its parts (attention.py, geglu.py, norms.py) stay
unaware of the residual stream.
"""

import torch
from torch import nn
from torch.nn import functional as F

from lamp_ros.kernels import operators as kernel_ops
from lamp_ros.policies.pi05.staged.attention import Attention
from lamp_ros.policies.pi05.staged.fan_out import FanOut
from lamp_ros.policies.pi05.staged.norms import add_then_norm, UnitRMSNorm


def add_linear(residual: torch.Tensor, linear: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """residual + linear(x) as one GEMM whose epilogue adds the residual (cuBLAS beta = 1); a
    plain add where the GEMM has a bias epilogue or is no plain linear (an FP8 one:
    torch._scaled_mm takes no residual)."""
    if linear.bias is not None or not isinstance(linear, nn.Linear):
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
        residual torch's addmm first copies it into its output (a 4 MB device copy in each of
        the prefix's layers; docs/notebook/), and the fused norm reads it anyway."""
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
        """gelu_tanh(fc1(h)). On the kernel path on a GPU, one cuBLASLt GEMM whose epilogue adds
        the bias and applies the GELU (tanh form) to the float32 sums: no GELU kernel, no second
        round trip of the 4304-wide hidden layer (faster per block than the GEMM and a GELU kernel;
        docs/notebook/). The CPU's `_addmm_activation` takes the erf GELU instead, so there the
        plain form stays."""
        if self.kernel and h.is_cuda and self.fc1.bias is not None \
                and isinstance(self.fc1, nn.Linear):  # not an FP8 fc1 (a precision plan)
            out = torch._addmm_activation(self.fc1.bias, h.reshape(-1, h.shape[-1]),
                                          self.fc1.weight.t(), use_gelu=True)
            return out.view(*h.shape[:-1], out.shape[-1])
        return F.gelu(self.fc1(h), approximate='tanh')
