"""The action expert's layer on fused kernels, each part on what the build GPU ran fastest.

The expert runs its layers (18 in pi0.5) once per Euler step (10) on 50 rows, so each layer is
a chain of small, weight-streaming kernels where launches and activation round trips cost as much
as the math. A layer is five parts, each with a fused lamp kernel
(kernels/triton_expert_gemm.py, triton_attention.py) and the library form it replaces:

    part       fused kernel                                  library form
    qkv        lamp::ada_linear (adaRMS folded into GEMM)     lamp::rms_norm, cuBLAS GEMM
    attention  lamp::mqa_attention (RoPE, both K/V sources)   lamp::rope x2, concat, 2 GEMMs
                                                              around lamp::masked_softmax
    o          lamp::gated_linear (gated residual epilogue)   cuBLAS GEMM, addcmul
    gate_up    lamp::ada_geglu (norm, 2 weights, GeGLU)      lamp::rms_norm, cuBLAS, lamp::geglu
    down       lamp::gated_linear                             cuBLAS GEMM, addcmul

The two normed parts have a third form, 'premade' (kernels/triton_premade.py): the kernel that
writes their input x (the layer's o for gate_up, the previous layer's down for qkv) also writes
x * mod and the pieces of each row's sum of squares (`lamp::gated_linear_prep`; after a library
o or down, or before the first layer, `lamp::norm_pieces`), and the part is one plain
weight-streaming GEMM with rstd, bias and GeGLU in its epilogue (`lamp::premade_linear`,
`lamp::premade_geglu`): no norm kernel, no GeGLU kernel, no prologue in the GEMM's loop.

A premade qkv before a fused attention may also rotate q and k in its epilogue (`rope`:
`lamp::premade_linear_rope`, its program taking the same dims of both halves of a head), and
the attention then reads them as they are, the action tokens' own keys after the prefix's in
one index space (`lamp::mqa_attention_rotated`): no split of their own, which every row block
rotated again in spilling registers. The build times the pair both ways and keeps the faster.

Which wins depends on the shape and the GPU (on the H200 cuBLAS streams a 1024-wide weight
faster than our Triton GEMM once the norm sits in its prologue; the premade forms beat both;
the fused attention and gated GEMMs win), so the lowering times every form, with every tile
candidate (kernels/tuning.py), and records the choice per part: tiles (7 values fused, 5
premade), or [] for the library form; the lowering's build-wide switches travel appended to the
tiles of the kernels they apply to (the dependent-launch mode, then for the gated GEMMs the
descriptor-load flag). (A premade part is timed on a made input: the few us
its producer's epilogue adds are not in its figure.) Every form computes the float32 reference
math of the passes' layer; only rounding points differ.
"""

import torch
from torch import nn
from torch.nn import functional as F

from lamp_ros.policies.pi05.staged.norms import StepAdaRMSNorm
from lamp_ros.kernels import operators as kernel_ops

PARTS = ('qkv', 'attention', 'o', 'gate_up', 'down')
COUNTERS = 1024  # split-K tile counters per layer (more than any tiling has output tiles)
LIBRARY = []  # the tiles value that selects a part's library form
PREMADE = 5  # the length of a premade form's tiles (triton_premade: block_w, block_k, warps,
# stages, swap); a fused GEMM's have 7
FIRST_PIECES = 32  # pieces of the sums of squares norm_pieces makes (a power of two)
GATED_TMA = ('o', 'down')  # the parts whose fused GEMM may load by tensor descriptor
# with `rope` on, the premade qkv leaves q multiplied by head_dim^-0.5 * log2(e) (the
# attention's softmax works in powers of 2), and the attention's own scale is what is left
LOG2E = kernel_ops.LOG2E


def form(tiles: list) -> str:
    """'library', 'premade' or 'fused': which form a part's tiles select."""
    return 'library' if tiles == LIBRARY else 'premade' if len(tiles) == PREMADE else 'fused'


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
        # programmatic dependent launch of every lamp kernel of the layer (fused parts and the
        # library forms' norm and GeGLU): 0 off, 1 or 2 (triton_kernels.grid_dependency)
        self.pdl = 0
        # the fused gated GEMMs (o, down) load x and W by tensor descriptor (1) instead of by
        # pointer (0): the same numbers, the ninth value of their tiles (GATED_TMA)
        self.tma = 0
        # 1: a premade qkv rotates q and k (and scales q) in its epilogue, and the fused
        # attention reads them as they are, the own keys after the prefix's
        # (lamp::premade_linear_rope, lamp::mqa_attention_rotated); the two parts' tiles are
        # then those forms' choices
        self.rope = 0

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

    def form(self, part: str) -> str:
        """form() of the part's tiles (the attention's: 'library' or not; its tiles are 5
        values, as a premade GEMM's)."""
        return form(self.tiles[part])

    def rotates_in_qkv(self) -> bool:
        """Whether q and k leave the qkv part rotated: `rope` on, with the two forms it needs
        (a premade qkv, a fused attention)."""
        return bool(self.rope) and self.form('qkv') == 'premade' \
            and self.tiles['attention'] != LIBRARY

    def step(self, layer, x, step: int, k_prefix, v_prefix, mask, rotation, carry=None,
             following=None) -> tuple:
        """The layer at Euler `step`; `rotation` is the action tokens' (cos, sin). carry: the
        (x * mod, pieces) of x that the layer before made for this layer's premade qkv, or
        None; following: the next layer's ExpertKernels (whether its qkv is premade decides
        whether this layer's down makes them) -> (x, carry for the next layer)."""
        qkv = self.qkv(layer, x, step, carry, rotation)
        x, carry = self.o(layer, self.attention(layer, qkv, k_prefix, v_prefix, mask, rotation),
                          x, step, self.mlp_mod[step] if self.form('gate_up') == 'premade'
                          else None)
        h = self.gate_up(layer, x, step, carry)
        mod_next = following.attn_mod[step] \
            if following is not None and following.form('qkv') == 'premade' else None
        return self.down(layer, h, x, step, mod_next)

    def _tiles(self, part: str) -> list:
        """A fused part's tiles, with the dependent-launch mode appended when it is on, and
        for the gated GEMMs the descriptor-load flag after it when that is on."""
        tiles = self.tiles[part]
        if tiles == LIBRARY:
            return tiles
        if self.tma and part in GATED_TMA and self.form(part) == 'fused':
            return [*tiles, self.pdl, self.tma]
        return [*tiles, self.pdl] if self.pdl else tiles

    def _premade_input(self, x, mod, carry) -> tuple:
        """(x * mod, pieces) from the kernel before, or made here when it made none."""
        if carry is not None:
            return carry
        return kernel_ops.norm_pieces(x, mod, min(FIRST_PIECES, x.shape[-1]), self.pdl)

    def qkv(self, layer, x, step, carry=None, rotation=None):
        """adaRMS(x) @ Wqkv^T -> the raw (unrotated) q/k/v of the action tokens, or with
        rotates_in_qkv() q and k rotated by `rotation` and q scaled (see LOG2E)."""
        w, tiles = layer.attn.in_proj.linears()[0].weight, self._tiles('qkv')
        if tiles == LIBRARY:
            return F.linear(layer.input_norm(x, step, self.pdl)[0], w)
        if self.form('qkv') == 'premade':
            xm, pieces = self._premade_input(x, self.attn_mod[step], carry)
            if self.rotates_in_qkv():
                cfg = layer.attn.cfg
                return kernel_ops.premade_linear_rope(
                    xm, pieces, w, self.attn_bias[step], *rotation, cfg.num_heads,
                    cfg.head_dim ** -0.5 * LOG2E, layer.input_norm.eps, tiles)
            return kernel_ops.premade_linear(xm, pieces, w, self.attn_bias[step],
                                             layer.input_norm.eps, tiles)
        return kernel_ops.ada_linear(x, w, self.attn_mod[step], self.attn_bias[step],
                                     layer.input_norm.eps, tiles, self.counters)

    def attention(self, layer, qkv, k_prefix, v_prefix, mask, rotation):
        """Every query head against the prefix K/V and the tokens' own -> (b, n, heads * d)."""
        cfg, tiles = layer.attn.cfg, self._tiles('attention')
        if self.rotates_in_qkv():
            return kernel_ops.mqa_attention_rotated(qkv, k_prefix, v_prefix, mask,
                                                    cfg.num_heads, 1 / LOG2E, tiles)
        if tiles != LIBRARY:
            return kernel_ops.mqa_attention(qkv, k_prefix, v_prefix, *rotation, mask,
                                            cfg.num_heads, cfg.head_dim ** -0.5, tiles)
        b, n, _ = qkv.shape
        d = cfg.head_dim
        q, k, v = qkv.split([cfg.num_heads * d, d, d], dim=-1)
        q = kernel_ops.rope(q.reshape(b, n, cfg.num_heads, d), *rotation)
        k = torch.cat([k_prefix, kernel_ops.rope(k.reshape(b, n, 1, d), *rotation)], dim=1)
        v = torch.cat([v_prefix, v.reshape(b, n, 1, d)], dim=1)
        return layer.attn.attention(q, k, v, mask)

    def _gated(self, part, inp, w, x, gate, mod_next):
        """x + gate * (inp @ W^T) -> (that, its (x * mod_next, pieces) when mod_next is
        given, else None)."""
        tiles = self._tiles(part)
        if tiles == LIBRARY:
            y = torch.addcmul(x, F.linear(inp, w), gate.to(x.dtype))
            if mod_next is None:
                return y, None
            return y, kernel_ops.norm_pieces(y, mod_next, min(FIRST_PIECES, y.shape[-1]),
                                             self.pdl)
        if mod_next is None:
            return kernel_ops.gated_linear(inp, w, x, gate, tiles, self.counters), None
        y, xm, pieces = kernel_ops.gated_linear_prep(inp, w, x, gate, mod_next, tiles,
                                                     self.counters)
        return y, (xm, pieces)

    def o(self, layer, a, x, step, mod_next=None):
        """x + gate * (a @ Wo^T) [, and its (x * mod_next, pieces) for a premade gate_up]."""
        return self._gated('o', a, layer.attn.o_proj.weight, x, self.attn_gate[step], mod_next)

    def gate_up(self, layer, x, step, carry=None):
        """gelu_tanh(gate) * up of adaRMS(x): the MLP's hidden layer."""
        w, tiles = layer.mlp.in_proj.linears()[0].weight, self._tiles('gate_up')
        if tiles == LIBRARY:
            return layer.mlp.hidden(layer.post_attn_norm(x, step, self.pdl)[0], self.pdl)
        w_gate, w_up = w.chunk(2)
        eps = layer.post_attn_norm.eps
        if self.form('gate_up') == 'premade':
            xm, pieces = self._premade_input(x, self.mlp_mod[step], carry)
            return kernel_ops.premade_geglu(xm, pieces, w_gate, w_up, self.gate_bias[step],
                                            self.up_bias[step], eps, tiles)
        return kernel_ops.ada_geglu(x, w_gate, w_up, self.mlp_mod[step], self.gate_bias[step],
                                    self.up_bias[step], eps, tiles, self.counters)

    def down(self, layer, h, x, step, mod_next=None):
        """x + gate * (h @ Wdown^T) [, and its (x * mod_next, pieces) for the next layer's
        premade qkv]."""
        return self._gated('down', h, layer.mlp.down_proj.weight, x, self.mlp_gate[step],
                           mod_next)
