"""The action expert's layer on fused kernels, each part on what the build GPU ran fastest.

The expert runs its layers (18 in pi0.5) once per Euler step (10) on 50 rows, so each layer is
a chain of small, weight-streaming kernels where launches and activation round trips cost as much
as the math. A layer is five parts, each with a fused lamp kernel (kernels/triton_expert.py) and
the library form it replaces:

    part       fused kernel                                  library form
    qkv        lamp::ada_linear (adaRMS folded into GEMM)     lamp::rms_norm, cuBLAS GEMM
    attention  lamp::mqa_attention (RoPE, both K/V sources)   lamp::rope x2, concat, 2 GEMMs
                                                              around lamp::masked_softmax
    o          lamp::gated_linear (gated residual epilogue)   cuBLAS GEMM, addcmul
    gate_up    lamp::ada_geglu (norm, 2 weights, GeGLU)      lamp::rms_norm, cuBLAS, lamp::geglu
    down       lamp::gated_linear                             cuBLAS GEMM, addcmul

Which wins depends on the shape and the GPU (on the H200 cuBLAS streams a 1024-wide weight
faster than our Triton GEMM once the norm sits in its prologue; the fused attention and gated
GEMMs win), so the lowering times both, with every tile candidate of the fused one
(kernels/tuning.py), and records the choice per part: tiles, or [] for the library form. Both
forms compute the float32 reference math of the passes' layer; only rounding points differ.

Where a norm's library form (rms_norm, cuBLAS) follows a fused gated GEMM, the norm needs no
kernel of its own: it is linear in x once rstd(x) is known, so the gated GEMM that writes x also
writes x * (1 + scale) and the sums of x^2 per column block (`lamp::gated_linear_norm`), cuBLAS
multiplies that, and the kernel after cuBLAS applies rstd and the shifted bias: the GeGLU
(`lamp::norm_geglu`) for the MLP's norm, the fused attention for the next layer's input norm
(its own, at the same Euler step: the stage passes `NormCarry` from layer to layer). That saves
two launches and an activation round trip per layer and step.
"""

from typing import NamedTuple

import torch
from torch import nn
from torch.nn import functional as F

from lamp_ros.compiler.passes.modules import StepAdaRMSNorm
from lamp_ros.kernels import ops as kernel_ops

PARTS = ('qkv', 'attention', 'o', 'gate_up', 'down')
COUNTERS = 1024  # split-K tile counters per layer (more than any tiling has output tiles)
LIBRARY = []  # the tiles value that selects a part's library form


class NormCarry(NamedTuple):
    """What an adaRMS norm folded across its cuBLAS GEMM reads of its input x, made by the gated
    GEMM that wrote x: x * (1 + scale) (x's dtype) and the sums of x^2 per column block of that
    GEMM, (rows, blocks) float32."""

    scaled: torch.Tensor
    sumsq: torch.Tensor


class ExpertKernels(nn.Module):
    """Per-Euler-step constants of one expert layer, (steps, size) each, and its parts' choices.

    The adaRMS norm before a linear is linear in x once rstd(x) is known, so the fused GEMMs
    compute rstd(x) * ((x * mod) @ W^T) + shift @ W^T: `*_mod` is 1 + scale, `*_bias` the
    shift pushed through the linear(s) the norm feeds (qkv; gate and up), `*_gate` the residual
    gate; float32, computed once from the norms' step tables and the weights."""

    def __init__(self, layer):
        super().__init__()
        qkv = layer.attn.in_proj.linears()[0].weight
        gate_up = layer.mlp.in_proj.linears()[0].weight
        with torch.no_grad():
            for name, norm, biases in (('attn', layer.input_norm, {'attn_bias': qkv}),
                                       ('mlp', layer.post_attn_norm,
                                        dict(zip(('gate_bias', 'up_bias'),
                                                 gate_up.chunk(2))))):
                scale, shift, gate = norm.table.float().chunk(3, dim=-1)
                self.register_buffer(f'{name}_mod', 1.0 + scale)
                self.register_buffer(f'{name}_gate', gate.contiguous())
                for bias, weight in biases.items():
                    self.register_buffer(bias, shift @ weight.float().t())
        # the split-K GEMMs' tile counters: zero between calls (the kernels reset them)
        self.register_buffer('counters', torch.zeros(COUNTERS, dtype=torch.int32,
                                                     device=qkv.device))
        self.tiles = {part: LIBRARY for part in PARTS}  # part -> tiles, or [] for the library

    @staticmethod
    def applies(layer) -> bool:
        """Whether `layer` is an expert layer in the form these parts read: adaRMS step
        tables, one-K/V-head attention on the kernel path, q/k/v and gate/up merged, no
        biases."""
        if layer.kv_only or not isinstance(layer.input_norm, StepAdaRMSNorm):
            return False
        attn, mlp = layer.attn, layer.mlp
        linears = (*attn.in_proj.linears(), attn.o_proj, *mlp.in_proj.linears(), mlp.down_proj)
        return (attn.fused and attn.kernel and attn.folds_heads
                and attn.in_proj.names == ('q', 'k', 'v') and len(attn.in_proj.linears()) == 1
                and mlp.in_proj.names == ('gate', 'up') and len(mlp.in_proj.linears()) == 1
                and all(lin.bias is None for lin in linears))

    @property
    def takes_carry(self) -> bool:
        """Whether the input norm folds across qkv's cuBLAS GEMM when the previous layer's
        down GEMM hands over a NormCarry: qkv in its library form, the fused attention after it
        (which finishes the norm)."""
        return self.tiles['qkv'] == LIBRARY and self.tiles['attention'] != LIBRARY

    @property
    def folds_mlp_norm(self) -> bool:
        """Whether the MLP's norm folds across gate/up's cuBLAS GEMM: o fused (it writes the
        NormCarry), gate_up in its library form (its GeGLU finishes the norm)."""
        return self.tiles['o'] != LIBRARY and self.tiles['gate_up'] == LIBRARY

    def step(self, layer, x, step: int, k_prefix, v_prefix, mask, rotation,
             carry: NormCarry | None = None, following=None) -> tuple:
        """The layer at Euler `step`; `rotation` is the action tokens' (cos, sin); `carry` what
        the previous layer's down GEMM left for this layer's input norm, `following` the next
        layer's ExpertKernels -> (x, the NormCarry for `following`, or None)."""
        carry = carry if self.takes_carry else None
        qkv = self.qkv(layer, x, step, carry)
        a = self.attention(layer, qkv, k_prefix, v_prefix, mask, rotation, step, carry)
        x, mlp_carry = self.o(layer, a, x, step, fold=self.folds_mlp_norm)
        h = self.gate_up(layer, x, step, mlp_carry)
        next_mod = following.attn_mod[step] if self.carries_to(following) else None
        return self.down(layer, h, x, step, next_mod)

    def carries_to(self, following) -> bool:
        """Whether this layer's down GEMM hands `following` (the next layer's ExpertKernels, or
        None) the NormCarry of its input norm."""
        return following is not None and following.takes_carry \
            and self.tiles['down'] != LIBRARY

    def qkv(self, layer, x, step, carry: NormCarry | None = None):
        """adaRMS(x) @ Wqkv^T -> the raw (unrotated) q/k/v of the action tokens; with `carry`,
        (x * mod) @ Wqkv^T, the attention finishing the norm."""
        w, tiles = layer.attn.in_proj.linears()[0].weight, self.tiles['qkv']
        if tiles == LIBRARY:
            if carry is not None:
                return F.linear(carry.scaled, w)
            return F.linear(layer.input_norm(x, step)[0], w)
        return kernel_ops.ada_linear(x, w, self.attn_mod[step], self.attn_bias[step],
                                     layer.input_norm.eps, tiles, self.counters)

    def attention(self, layer, qkv, k_prefix, v_prefix, mask, rotation, step=0,
                  carry: NormCarry | None = None):
        """Every query head against the prefix K/V and the tokens' own -> (b, n, heads * d);
        with `carry`, qkv is the folded norm's raw GEMM output."""
        cfg, tiles = layer.attn.cfg, self.tiles['attention']
        if tiles != LIBRARY:
            norm = () if carry is None else (carry.sumsq, self.attn_bias[step],
                                             self.attn_mod.shape[-1], layer.input_norm.eps)
            return kernel_ops.mqa_attention(qkv, k_prefix, v_prefix, *rotation, mask,
                                            cfg.num_heads, cfg.head_dim ** -0.5, tiles, *norm)
        b, n, _ = qkv.shape
        d = cfg.head_dim
        q, k, v = qkv.split([cfg.num_heads * d, d, d], dim=-1)
        q = kernel_ops.rope(q.reshape(b, n, cfg.num_heads, d), *rotation)
        k = torch.cat([k_prefix, kernel_ops.rope(k.reshape(b, n, 1, d), *rotation)], dim=1)
        v = torch.cat([v_prefix, v.reshape(b, n, 1, d)], dim=1)
        return layer.attn.attention(q, k, v, mask)

    def o(self, layer, a, x, step, fold: bool = False) -> tuple:
        """x + gate * (a @ Wo^T) -> (x, the NormCarry of the MLP's norm when `fold`)."""
        return self._gated('o', layer.attn.o_proj.weight, a, x, self.attn_gate[step],
                           self.mlp_mod[step] if fold else None)

    def down(self, layer, h, x, step, next_mod=None) -> tuple:
        """x + gate * (h @ Wdown^T) -> (x, the NormCarry of the next layer's input norm, whose
        1 + scale is `next_mod`, or None)."""
        return self._gated('down', layer.mlp.down_proj.weight, h, x, self.mlp_gate[step],
                           next_mod)

    def _gated(self, part, w, inp, x, gate, mod) -> tuple:
        """x + gate * (inp @ W^T), and with `mod` (the fused form only) the NormCarry of the
        norm that reads the result."""
        tiles = self.tiles[part]
        if tiles == LIBRARY:
            return torch.addcmul(x, F.linear(inp, w), gate.to(x.dtype)), None
        if mod is None:
            return kernel_ops.gated_linear(inp, w, x, gate, tiles, self.counters), None
        y, scaled, sumsq = kernel_ops.gated_linear_norm(inp, w, x, gate, mod, tiles,
                                                        self.counters)
        return y, NormCarry(scaled, sumsq)

    def gate_up(self, layer, x, step, carry: NormCarry | None = None):
        """gelu_tanh(gate) * up of adaRMS(x): the MLP's hidden layer; with `carry`, cuBLAS on
        x * mod and the norm finished in the GeGLU."""
        w, tiles = layer.mlp.in_proj.linears()[0].weight, self.tiles['gate_up']
        if tiles == LIBRARY:
            if carry is not None:
                gate, up = F.linear(carry.scaled, w).chunk(2, dim=-1)
                return kernel_ops.norm_geglu(gate, up, carry.sumsq, self.gate_bias[step],
                                             self.up_bias[step], x.shape[-1],
                                             layer.post_attn_norm.eps)
            return layer.mlp.hidden(layer.post_attn_norm(x, step)[0])
        w_gate, w_up = w.chunk(2)
        return kernel_ops.ada_geglu(x, w_gate, w_up, self.mlp_mod[step], self.gate_bias[step],
                                    self.up_bias[step], layer.post_attn_norm.eps, tiles,
                                    self.counters)


def folded_norms(layers) -> int:
    """How many of the adaRMS norms of `layers` (in order) run folded across their cuBLAS GEMM,
    with no kernel of their own: what the lowering reports."""
    kernels = [layer.expert_kernels for layer in layers]
    count = 0
    for before, k in zip([None] + kernels[:-1], kernels):
        if k is not None:
            count += int(k.folds_mlp_norm) + int(before is not None and before.carries_to(k))
    return count
