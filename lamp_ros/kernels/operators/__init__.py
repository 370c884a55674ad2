"""The `lamp::*` torch operators: one fused kernel each on CUDA, plain torch on the CPU.

The CPU implementations are the specification: the same float32 math as the passes' modules
(policies/pi05/staged/modules.py), so a stage switched onto these operators computes what it did
before, and tests on the CPU check the switch. The CUDA implementations call the Triton kernels
(triton_kernels.py, imported on first use so that CPU-only machines never need Triton). The fake
implementations give torch.export the output shapes, and the exported program names the
operator: whoever loads a program that uses them imports this module first.
"""


import torch
from torch.nn import functional as F

from lamp_ros.kernels.rotary import rotate


# log2(e): the attention kernels' softmax works in powers of 2, so their scores are scaled by
# scale * LOG2E; premade_linear_rope may put that factor into q already
# (ExpertKernels: q_scale = head_dim^-0.5 * LOG2E, the attention's scale 1 / LOG2E)
LOG2E = 1.4426950408889634


def _triton():
    from lamp_ros.kernels import triton_kernels
    return triton_kernels


def _triton_expert():
    from lamp_ros.kernels import triton_expert
    return triton_expert


# ---- rms_norm: x / rms(x) [* (1 + scale) + shift], float32 inside, x's dtype out ----

@torch.library.custom_op('lamp::rms_norm', mutates_args=())
def rms_norm(x: torch.Tensor, scale: torch.Tensor | None, shift: torch.Tensor | None,
             eps: float, pdl: int = 0) -> torch.Tensor:
    """Unit RMSNorm over the last dim; with `scale`/`shift` (width,) the adaRMS modulation.
    pdl: programmatic dependent launch on the GPU (triton_kernels.grid_dependency)."""
    if x.is_cuda:
        return _triton().rms_norm(x, scale, shift, eps, pdl=pdl)
    return rms_norm_reference(x, scale, shift, eps)


def rms_norm_reference(x, scale, shift, eps):
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if scale is not None:
        xf = xf * (1.0 + scale.float()) + shift.float()
    return xf.to(x.dtype)


@rms_norm.register_fake
def _(x, scale, shift, eps, pdl=0):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


# ---- layer_norm / add_norm: the affine-free LayerNorm, and a residual add fused into a norm ----
# A residual add whose GEMM cannot take it in its epilogue (a bias epilogue already, or
# torch._scaled_mm) is otherwise a kernel of its own right before the norm that reads its sum:
# add_norm does both in one pass over the rows.

@torch.library.custom_op('lamp::layer_norm', mutates_args=())
def layer_norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    """LayerNorm over the last dim without affine (folded into the next linears)."""
    if x.is_cuda:
        return _triton().norm(x, eps, center=True)
    return layer_norm_reference(x, eps)


def layer_norm_reference(x, eps):
    return F.layer_norm(x.float(), x.shape[-1:], eps=eps).to(x.dtype)


@layer_norm.register_fake
def _(x, eps):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op('lamp::add_norm', mutates_args=())
def add_norm(x: torch.Tensor, residual: torch.Tensor, eps: float,
             center: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(s, norm(s)) for s = x + residual in x's dtype (rounded once, as the eager add): the
    LayerNorm without affine when `center`, else the unit RMSNorm."""
    if x.is_cuda:
        return _triton().norm(x, eps, residual=residual, center=center)
    return add_norm_reference(x, residual, eps, center)


def add_norm_reference(x, residual, eps, center):
    s = x + residual
    return s, (layer_norm_reference(s, eps) if center else rms_norm_reference(s, None, None, eps))


@add_norm.register_fake
def _(x, residual, eps, center):
    return (torch.empty_like(x, memory_format=torch.contiguous_format),
            torch.empty_like(x, memory_format=torch.contiguous_format))


# ---- rope: rotate-half RoPE from gathered cos/sin tables ----

@torch.library.custom_op('lamp::rope', mutates_args=())
def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (b, n, heads, d) rotated by cos/sin (b, n, d/2) float32 -> contiguous, x's dtype."""
    if x.is_cuda:
        return _triton().rope(x, cos, sin)
    return rope_reference(x, cos, sin)


rope_reference = rotate  # the eager models' own code


@rope.register_fake
def _(x, cos, sin):
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


@torch.library.custom_op('lamp::rope_qk', mutates_args=())
def rope_qk(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor,
            sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q (b, n, heads, d) and k (b, n, kv_heads, d) of the same tokens rotated in one launch."""
    if q.is_cuda:
        return _triton().rope(q, cos, sin, k)
    return rope_reference(q, cos, sin), rope_reference(k, cos, sin)


@rope_qk.register_fake
def _(q, k, cos, sin):
    return (torch.empty(q.shape, dtype=q.dtype, device=q.device),
            torch.empty(k.shape, dtype=k.dtype, device=k.device))


# ---- geglu: gelu_tanh(gate) * up ----

@torch.library.custom_op('lamp::geglu', mutates_args=())
def geglu(gate: torch.Tensor, up: torch.Tensor, pdl: int = 0) -> torch.Tensor:
    """gelu_tanh(gate) * up for two (..., m) tensors (views of one merged GEMM are fine); pdl
    as rms_norm's."""
    if gate.is_cuda:
        return _triton().geglu(gate, up, pdl=pdl)
    return geglu_reference(gate, up)


def geglu_reference(gate, up):
    return F.gelu(gate, approximate='tanh') * up


@geglu.register_fake
def _(gate, up, pdl=0):
    return torch.empty(gate.shape, dtype=gate.dtype, device=gate.device)


# ---- FP8 rows: e4m3 codes and a power-of-two scale per row (the FP8 GEMMs' activations) ----
# e4m3 keeps 4 significant bits; a row's scale is the power of two that brings its largest
# magnitude into (224, 448]. A power of two is exact in every float dtype, so a scale survives
# the cast of a module to bf16, and codes * scale is exact: the only rounding is the code's.

E4M3_MAX = 448.0


def e4m3_round(v: torch.Tensor) -> torch.Tensor:
    """float32 v within +-448 -> the nearest e4m3 value (ties to even), still float32.

    Veltkamp's split keeps the top 4 significant bits of a float32 exactly (no float8 dtype,
    so the CPU artifacts' ONNX export can hold it); below 2^-6 e4m3 is subnormal, a fixed step
    of 2^-9. Bit for bit what `.to(torch.float8_e4m3fn)` gives (tested)."""
    c = v * 1048577.0  # 2^20 + 1: 24 - 20 = 4 bits stay
    top = c - (c - v)
    return torch.where(v.abs() < 2.0 ** -6, torch.round(v * 512.0) / 512.0, top)


def e4m3_steps(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|a - b| in e4m3 steps (the spacing of codes at the larger magnitude): how far apart
    two quantisations of the same numbers are."""
    big = torch.maximum(a.abs(), b.abs()).clamp(min=2.0 ** -6)
    return (a - b).abs() / torch.pow(2.0, torch.floor(torch.log2(big)) - 3)


def fp8_scale(amax: torch.Tensor) -> torch.Tensor:
    """The power of two 2^e with amax / 2^e in (224, 448] (amax 0: the smallest one used)."""
    amax = amax.float().clamp(min=2.0 ** -100)
    e = torch.floor(torch.log2(amax))
    e = e - (torch.pow(2.0, e) > amax).float() + (torch.pow(2.0, e + 1) <= amax).float()
    mantissa = amax / torch.pow(2.0, e)  # [1, 2), exact: a power-of-two division
    return torch.pow(2.0, e - 8 + (mantissa > 1.75).float())


def fp8_rows_reference(x: torch.Tensor) -> tuple:
    """x (..., K) -> (codes (..., K) float32 e4m3 values, scale (..., 1) float32)."""
    xf = x.float()
    scale = fp8_scale(xf.abs().amax(-1, keepdim=True))
    return e4m3_round(xf / scale), scale


def _fp8_fake(x: torch.Tensor) -> tuple:
    codes_dtype = torch.float8_e4m3fn if x.device.type == 'cuda' else torch.float32
    return (torch.empty(x.shape, dtype=codes_dtype, device=x.device),
            torch.empty((*x.shape[:-1], 1), dtype=torch.float32, device=x.device))


@torch.library.custom_op('lamp::fp8_rows', mutates_args=())
def fp8_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x (..., K) as FP8 rows: (codes, scale (..., 1) float32); codes are float8_e4m3fn on
    CUDA (what torch._scaled_mm reads), their float32 values on the CPU."""
    if x.is_cuda:
        return _triton().fp8_rows(x)
    return fp8_rows_reference(x)


@fp8_rows.register_fake
def _(x):
    return _fp8_fake(x)


@torch.library.custom_op('lamp::rms_norm_fp8', mutates_args=())
def rms_norm_fp8(x: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The unit RMSNorm of x, in x's dtype, as FP8 rows in one pass (what an FP8 GEMM after
    the norm reads; the normed rows are never stored)."""
    if x.is_cuda:
        return _triton().fp8_rows(x, eps=eps)
    return rms_norm_fp8_reference(x, eps)


def rms_norm_fp8_reference(x, eps):
    return fp8_rows_reference(rms_norm_reference(x, None, None, eps))


@rms_norm_fp8.register_fake
def _(x, eps):
    return _fp8_fake(x)


@torch.library.custom_op('lamp::add_rms_norm_fp8', mutates_args=())
def add_rms_norm_fp8(x: torch.Tensor, residual: torch.Tensor,
                     eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x + residual in x's dtype, and its unit RMSNorm as FP8 rows) in one pass: the prefix's
    attention output added to the residual stream by the kernel that makes the MLP's FP8 rows,
    where a GEMM epilogue would have had torch copy the residual into its output first."""
    if x.is_cuda:
        return _triton().fp8_rows(x, eps=eps, residual=residual)
    return add_rms_norm_fp8_reference(x, residual, eps)


def add_rms_norm_fp8_reference(x, residual, eps):
    total = (x.float() + residual.float()).to(x.dtype)
    return (total, *rms_norm_fp8_reference(total, eps))


@add_rms_norm_fp8.register_fake
def _(x, residual, eps):
    return (torch.empty_like(x), *_fp8_fake(x))


@torch.library.custom_op('lamp::geglu_fp8', mutates_args=())
def geglu_fp8(gate: torch.Tensor, up: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """gelu_tanh(gate) * up as FP8 rows in one pass (the product never stored in bf16)."""
    if gate.is_cuda:
        return _triton().fp8_rows(gate, up)
    return geglu_fp8_reference(gate, up)


def geglu_fp8_reference(gate, up):
    return fp8_rows_reference(geglu_reference(gate.float(), up.float()))


@geglu_fp8.register_fake
def _(gate, up):
    return _fp8_fake(gate)


# ---- letterbox: the cameras' resize-with-pad from their frames' bytes (ops/letterbox.py) ----

@torch.library.custom_op('lamp::letterbox', mutates_args=())
def letterbox(frames: list[torch.Tensor], geometry: torch.Tensor) -> torch.Tensor:
    """One flat uint8 frame per camera (only the bytes its tables name are read) and the
    tables (1, cams, 2, size, 4) int32 -> the letterboxed pixels (1, cams, size, size, 3)
    uint8, the bytes OpenCV's INTER_LINEAR_EXACT resize-with-pad makes on the host."""
    if geometry.is_cuda:
        return _triton().letterbox(frames, geometry)
    return letterbox_reference(frames, geometry)


def letterbox_reference(frames, geometry):
    """The CPU implementation: ops/letterbox.py's definition (numpy, int64), camera by camera."""
    from lamp_ros.ops.letterbox import letterbox_reference as one_camera
    tables = geometry.cpu().numpy()
    return torch.stack([torch.from_numpy(one_camera(frame.cpu().numpy(), tables[0, i]))
                        for i, frame in enumerate(frames)])[None].to(geometry.device)


@letterbox.register_fake
def _(frames, geometry):
    size = geometry.shape[-2]
    return torch.empty((1, len(frames), size, size, 3), dtype=torch.uint8,
                       device=geometry.device)


# ---- masked_softmax: the attention probabilities of the eager code, heads folded into rows ----

@torch.library.custom_op('lamp::masked_softmax', mutates_args=())
def masked_softmax(scores: torch.Tensor, mask: torch.Tensor, heads: int,
                   scale: float) -> torch.Tensor:
    """softmax(scale * scores) where `mask` allows, float32 inside, scores' dtype out.

    scores (b, n * heads, m), rows token-major (row = token * heads + head: every query head of
    a single-KV-head attention as one matrix); mask (b, n, m) bool, shared by a token's heads.
    Masked logits get the eager code's finite fill, so a fully masked row is uniform, not NaN."""
    if scores.is_cuda:
        return _triton().masked_softmax(scores, mask, heads, scale)
    return masked_softmax_reference(scores, mask, heads, scale)


def masked_softmax_reference(scores, mask, heads, scale):
    logits = scores.float() * scale
    logits = logits.masked_fill(~mask.repeat_interleave(heads, dim=1),
                                torch.finfo(torch.float32).min)
    return logits.softmax(-1).to(scores.dtype)


@masked_softmax.register_fake
def _(scores, mask, heads, scale):
    return torch.empty(scores.shape, dtype=scores.dtype, device=scores.device)


# ---- the action expert's layer in five kernels (triton_expert.py) ----
# `tiles` are the kernels' block sizes: chosen per shape by kernels/tuning.py at build time and
# recorded in the exported program; the CPU references ignore them. `counters` (int32 zeros) is
# the split-K GEMMs' scratch: the kernel counts finished slices in it and leaves it zero again,
# so to every caller it is an unchanged input (hence no `mutates_args`).

def _ada_projection(x, weight, mod, bias, eps):
    """rstd(x) * ((x * mod) @ W^T) + bias in float32: adaRMS (scale = mod - 1) then a linear,
    the shift having been pushed through the linear into `bias` (shift @ W^T)."""
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return rstd * ((xf * mod.float()) @ weight.float().t()) + bias.float()


@torch.library.custom_op('lamp::ada_linear', mutates_args=())
def ada_linear(x: torch.Tensor, weight: torch.Tensor, mod: torch.Tensor, bias: torch.Tensor,
               eps: float, tiles: list[int], counters: torch.Tensor) -> torch.Tensor:
    """adaRMS-normalised x through a linear in one GEMM (the norm folded in; module doc of
    triton_expert.py): x (..., K), weight (N, K), mod (K,), bias (N,) -> (..., N)."""
    if x.is_cuda:
        return _triton_expert().expert_gemm(x, weight, tiles, counters=counters, mod=mod,
                                            bias=bias, eps=eps)
    return ada_linear_reference(x, weight, mod, bias, eps)


def ada_linear_reference(x, weight, mod, bias, eps):
    return _ada_projection(x, weight, mod, bias, eps).to(x.dtype)


@ada_linear.register_fake
def _(x, weight, mod, bias, eps, tiles, counters):
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


@torch.library.custom_op('lamp::ada_geglu', mutates_args=())
def ada_geglu(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, mod: torch.Tensor,
              bias_gate: torch.Tensor, bias_up: torch.Tensor, eps: float,
              tiles: list[int], counters: torch.Tensor) -> torch.Tensor:
    """gelu_tanh(gate) * up of two `ada_linear`s of the same x, in one GEMM that streams both
    weights: the GeGLU MLP's hidden layer -> (..., F)."""
    if x.is_cuda:
        return _triton_expert().expert_gemm(x, w_gate, tiles, counters=counters, weight2=w_up,
                                            mod=mod, bias=bias_gate, bias2=bias_up, eps=eps)
    return ada_geglu_reference(x, w_gate, w_up, mod, bias_gate, bias_up, eps)


def ada_geglu_reference(x, w_gate, w_up, mod, bias_gate, bias_up, eps):
    gate = _ada_projection(x, w_gate, mod, bias_gate, eps)
    return geglu_reference(gate, _ada_projection(x, w_up, mod, bias_up, eps)).to(x.dtype)


@ada_geglu.register_fake
def _(x, w_gate, w_up, mod, bias_gate, bias_up, eps, tiles, counters):
    return x.new_empty((*x.shape[:-1], w_gate.shape[0]))


@torch.library.custom_op('lamp::gated_linear', mutates_args=())
def gated_linear(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor,
                 gate: torch.Tensor | None, tiles: list[int],
                 counters: torch.Tensor) -> torch.Tensor:
    """residual + gate * (x @ W^T) (gate (N,) per column, or none) in one GEMM's epilogue."""
    if x.is_cuda:
        return _triton_expert().expert_gemm(x, weight, tiles, counters=counters,
                                            residual=residual, gate=gate)
    return gated_linear_reference(x, weight, residual, gate)


def gated_linear_reference(x, weight, residual, gate):
    y = x.float() @ weight.float().t()
    if gate is not None:
        y = y * gate.float()
    return (residual.float() + y).to(residual.dtype)


@gated_linear.register_fake
def _(x, weight, residual, gate, tiles, counters):
    return torch.empty_like(residual, memory_format=torch.contiguous_format)


# ---- the normed GEMMs as plain weight streams (triton_premade.py) ----
# The kernel that writes x also writes what the next adaRMS-normed GEMM reads: xm = x * mod
# (rounded to x's dtype) and `pieces` (P, rows) float32, piece j the sum of squares of x's rows
# over column block j (x as stored). The GEMM then needs no prologue: rstd from the pieces'
# sum, the rest as ada_linear / ada_geglu.

def _triton_premade():
    from lamp_ros.kernels import triton_premade
    return triton_premade


def _pieces_reference(x, pieces: int) -> torch.Tensor:
    xf = x.float().reshape(-1, x.shape[-1])
    return xf.pow(2).reshape(xf.shape[0], pieces, -1).sum(-1).t().contiguous()


def _premade_out(x, mod, pieces: int):
    return (x.float() * mod.float()).to(x.dtype), _pieces_reference(x, pieces)


def _pieces_fake(x, pieces: int):
    rows = x.numel() // x.shape[-1]
    return x.new_empty((pieces, rows), dtype=torch.float32)


@torch.library.custom_op('lamp::norm_pieces', mutates_args=())
def norm_pieces(x: torch.Tensor, mod: torch.Tensor, pieces: int,
                pdl: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(x * mod, pieces) of an x no gated GEMM made (the expert's first layer)."""
    if x.is_cuda:
        return _triton_premade().norm_pieces(x, mod, pieces, pdl=pdl)
    return _premade_out(x, mod, pieces)


@norm_pieces.register_fake
def _(x, mod, pieces, pdl=0):
    return torch.empty_like(x, memory_format=torch.contiguous_format), _pieces_fake(x, pieces)


@torch.library.custom_op('lamp::gated_linear_prep', mutates_args=())
def gated_linear_prep(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor,
                      gate: torch.Tensor | None, mod_next: torch.Tensor, tiles: list[int],
                      counters: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """gated_linear, and from the same epilogue its output's (x * mod_next, pieces) for the
    normed GEMM after it: one piece per column block of the tiling (N / tiles[1])."""
    if x.is_cuda:
        return _triton_expert().expert_gemm(x, weight, tiles, counters=counters,
                                            residual=residual, gate=gate, mod_next=mod_next)
    y = gated_linear_reference(x, weight, residual, gate)
    return (y, *_premade_out(y, mod_next, weight.shape[0] // tiles[1]))


@gated_linear_prep.register_fake
def _(x, weight, residual, gate, mod_next, tiles, counters):
    y = torch.empty_like(residual, memory_format=torch.contiguous_format)
    return y, torch.empty_like(y), _pieces_fake(y, weight.shape[0] // tiles[1])


def _premade_projection(xm, pieces, weight, bias, eps):
    """rstd * (xm @ W^T) + bias in float32, rstd from the pieces (ada_linear's math)."""
    sumsq = pieces.float().sum(0).reshape(*xm.shape[:-1], 1)
    rstd = torch.rsqrt(sumsq / xm.shape[-1] + eps)
    return rstd * (xm.float() @ weight.float().t()) + bias.float()


@torch.library.custom_op('lamp::premade_linear', mutates_args=())
def premade_linear(xm: torch.Tensor, pieces: torch.Tensor, weight: torch.Tensor,
                   bias: torch.Tensor, eps: float, tiles: list[int]) -> torch.Tensor:
    """ada_linear of the x whose (x * mod, pieces) the kernel before made -> (..., N)."""
    if xm.is_cuda:
        return _triton_premade().premade_gemm(xm, pieces, weight, bias, eps, tiles)
    return premade_linear_reference(xm, pieces, weight, bias, eps)


def premade_linear_reference(xm, pieces, weight, bias, eps):
    return _premade_projection(xm, pieces, weight, bias, eps).to(xm.dtype)


@premade_linear.register_fake
def _(xm, pieces, weight, bias, eps, tiles):
    return xm.new_empty((*xm.shape[:-1], weight.shape[0]))


@torch.library.custom_op('lamp::premade_linear_rope', mutates_args=())
def premade_linear_rope(xm: torch.Tensor, pieces: torch.Tensor, weight: torch.Tensor,
                        bias: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, heads: int,
                        q_scale: float, eps: float, tiles: list[int]) -> torch.Tensor:
    """premade_linear of a q/k/v weight (heads + 2 heads of d) whose epilogue also rotates q
    and k by cos/sin (b, n, d/2) and scales q by q_scale, rounded once -> (b, n, (heads + 2) *
    d): what mqa_attention_rotated reads."""
    if xm.is_cuda:
        return _triton_premade().premade_gemm(xm, pieces, weight, bias, eps, tiles,
                                              rope=(cos, sin, heads, q_scale))
    return premade_linear_rope_reference(xm, pieces, weight, bias, cos, sin, heads, q_scale,
                                         eps)


def premade_linear_rope_reference(xm, pieces, weight, bias, cos, sin, heads, q_scale, eps):
    y = _premade_projection(xm, pieces, weight, bias, eps)
    b, n = cos.shape[:2]
    d = weight.shape[0] // (heads + 2)
    y = y.reshape(b, n, heads + 2, d)
    q = rotate(y[:, :, :heads], cos.float(), sin.float()) * q_scale
    k = rotate(y[:, :, heads:heads + 1], cos.float(), sin.float())
    return torch.cat([q, k, y[:, :, heads + 1:]], dim=2).reshape(*xm.shape[:-1], -1) \
        .to(xm.dtype)


@premade_linear_rope.register_fake
def _(xm, pieces, weight, bias, cos, sin, heads, q_scale, eps, tiles):
    return xm.new_empty((*xm.shape[:-1], weight.shape[0]))


@torch.library.custom_op('lamp::premade_geglu', mutates_args=())
def premade_geglu(xm: torch.Tensor, pieces: torch.Tensor, w_gate: torch.Tensor,
                  w_up: torch.Tensor, bias_gate: torch.Tensor, bias_up: torch.Tensor,
                  eps: float, tiles: list[int]) -> torch.Tensor:
    """ada_geglu of the x whose (x * mod, pieces) the kernel before made -> (..., F)."""
    if xm.is_cuda:
        return _triton_premade().premade_gemm(xm, pieces, w_gate, bias_gate, eps, tiles,
                                              weight2=w_up, bias2=bias_up)
    return premade_geglu_reference(xm, pieces, w_gate, w_up, bias_gate, bias_up, eps)


def premade_geglu_reference(xm, pieces, w_gate, w_up, bias_gate, bias_up, eps):
    gate = _premade_projection(xm, pieces, w_gate, bias_gate, eps)
    up = _premade_projection(xm, pieces, w_up, bias_up, eps)
    return geglu_reference(gate, up).to(xm.dtype)


@premade_geglu.register_fake
def _(xm, pieces, w_gate, w_up, bias_gate, bias_up, eps, tiles):
    return xm.new_empty((*xm.shape[:-1], w_gate.shape[0]))


@torch.library.custom_op('lamp::mqa_attention', mutates_args=())
def mqa_attention(qkv: torch.Tensor, k_prefix: torch.Tensor, v_prefix: torch.Tensor,
                  cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor, heads: int,
                  scale: float, tiles: list[int]) -> torch.Tensor:
    """The action tokens' multi-query attention from the raw qkv GEMM output (b, n,
    (heads + 2) * d): q and the tokens' own k rotated by cos/sin (b, n, d/2), keys = the
    rotated prefix K (b, T, [1,] d) then the tokens' k, values likewise, `mask` (b, n, T + n)
    bool with the eager code's finite fill -> (b, n, heads * d)."""
    if qkv.is_cuda:
        return _triton_expert().mqa_attention(qkv, k_prefix, v_prefix, cos, sin, mask, heads,
                                              scale, tiles)
    return mqa_attention_reference(qkv, k_prefix, v_prefix, cos, sin, mask, heads, scale)


def mqa_attention_reference(qkv, k_prefix, v_prefix, cos, sin, mask, heads, scale):
    b, n, _ = qkv.shape
    d = k_prefix.shape[-1]
    q, k, v = qkv.float().split([heads * d, d, d], dim=-1)
    q = rotate(q.reshape(b, n, heads, d), cos, sin)
    k = rotate(k.reshape(b, n, 1, d), cos, sin).reshape(b, n, d)
    keys = torch.cat([k_prefix.float().reshape(b, -1, d), k], dim=1)
    values = torch.cat([v_prefix.float().reshape(b, -1, d), v], dim=1)
    return _folded_attention(q, keys, values, mask, heads, scale).to(qkv.dtype)


def _folded_attention(q, keys, values, mask, heads, scale):
    """Every head of q (b, n, heads, d) as one query row against one K/V head (b, m, d), the
    eager code's masked softmax between, in float32 -> (b, n, heads * d)."""
    b, n, _, d = q.shape
    probs = masked_softmax_reference(q.float().reshape(b, n * heads, d)
                                     @ keys.float().transpose(1, 2), mask, heads, scale)
    return (probs.float() @ values.float()).reshape(b, n, heads * d)


@mqa_attention.register_fake
def _(qkv, k_prefix, v_prefix, cos, sin, mask, heads, scale, tiles):
    return qkv.new_empty((qkv.shape[0], qkv.shape[1], heads * k_prefix.shape[-1]))


@torch.library.custom_op('lamp::mqa_attention_rotated', mutates_args=())
def mqa_attention_rotated(qkv: torch.Tensor, k_prefix: torch.Tensor, v_prefix: torch.Tensor,
                          mask: torch.Tensor, heads: int, scale: float,
                          tiles: list[int]) -> torch.Tensor:
    """mqa_attention of a qkv whose q and own k are already rotated (premade_linear_rope's
    output; q may carry part of the scale, the rest is `scale`): keys = the prefix K (b, T,
    [1,] d) then the tokens' k, values likewise -> (b, n, heads * d)."""
    if qkv.is_cuda:
        return _triton_expert().mqa_attention_rotated(qkv, k_prefix, v_prefix, mask, heads,
                                                      scale, tiles)
    return mqa_attention_rotated_reference(qkv, k_prefix, v_prefix, mask, heads, scale)


def mqa_attention_rotated_reference(qkv, k_prefix, v_prefix, mask, heads, scale):
    b, n, _ = qkv.shape
    d = k_prefix.shape[-1]
    q, k, v = qkv.float().split([heads * d, d, d], dim=-1)
    keys = torch.cat([k_prefix.float().reshape(b, -1, d), k], dim=1)
    values = torch.cat([v_prefix.float().reshape(b, -1, d), v], dim=1)
    return _folded_attention(q.reshape(b, n, heads, d), keys, values, mask, heads,
                             scale).to(qkv.dtype)


@mqa_attention_rotated.register_fake
def _(qkv, k_prefix, v_prefix, mask, heads, scale, tiles):
    return qkv.new_empty((qkv.shape[0], qkv.shape[1], heads * k_prefix.shape[-1]))


@torch.library.custom_op('lamp::mqa_flash', mutates_args=())
def mqa_flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
              heads: int, scale: float, tiles: list[int]) -> torch.Tensor:
    """Flash attention of rotated q (b, n, heads, d) against one K/V head k, v (b, T, [1,] d)
    under `mask` (b, n, T) bool with the eager code's finite fill -> (b, n, heads * d): the
    prefix's attention without its score matrix in memory."""
    if q.is_cuda:
        return _triton_expert().mqa_flash(q, k, v, mask, heads, scale, tiles)
    return mqa_flash_reference(q, k, v, mask, heads, scale)


def mqa_flash_reference(q, k, v, mask, heads, scale):
    b, _, _, d = q.shape
    return _folded_attention(q, k.reshape(b, -1, d), v.reshape(b, -1, d), mask, heads,
                             scale).to(q.dtype)


@mqa_flash.register_fake
def _(q, k, v, mask, heads, scale, tiles):
    return q.new_empty((q.shape[0], q.shape[1], heads * q.shape[-1]))


# ---- lt_linear: a plain linear on the cuBLASLt algorithm the build measured fastest ----
# `table` holds, per row count the build timed (one per prompt-length graph for the prefix), the
# algorithm that beat torch's op: ALGORITHM_ENTRY ints each, [rows, its 8 words, workspace
# bytes] (kernels/cublaslt.py). `cublaslt` and `gpu` are where it was measured: the bytes mean
# something to that library version on that GPU only, so anywhere else, or at a row count the
# table does not hold, the operator is torch's op, as the stage was before. (A build with the
# spec's build.gemm_algorithms false stores none.)

ALGORITHM_ENTRY = 10


def algorithm_table(chosen: dict) -> list:
    """{rows: cublaslt.Algorithm} -> the operator's `table` argument (rows ascending)."""
    table = []
    for rows in sorted(chosen):
        algo = chosen[rows]
        table += [int(rows), *algo.words(), int(algo.workspace)]
    return table


def table_algorithm(table, rows: int):
    """The cublaslt.Algorithm stored for `rows` in a `table`, or None."""
    from lamp_ros.kernels import cublaslt
    if len(table) % ALGORITHM_ENTRY:
        raise ValueError(f'lt_linear: a table of {len(table)} ints is not made of '
                         f'{ALGORITHM_ENTRY}-int entries')
    for i in range(0, len(table), ALGORITHM_ENTRY):
        if table[i] == rows:
            entry = table[i + 1:i + ALGORITHM_ENTRY]
            return cublaslt.Algorithm.from_words(entry[:-1], entry[-1])
    return None


@torch.library.custom_op('lamp::lt_linear', mutates_args=())
def lt_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, weight_kn: bool,
              table: list[int], cublaslt: int, gpu: str) -> torch.Tensor:
    """x (rows, in) @ W^T [+ bias] -> (rows, out), W stored (out, in), or (in, out) with
    `weight_kn`: on the GPU the stored cuBLASLt algorithm for these rows where this process's
    cuBLASLt and GPU are the ones it was measured on, else torch's op (the reference)."""
    if x.is_cuda:
        out = _lt_linear_stored(x, weight, bias, weight_kn, table, cublaslt, gpu)
        if out is not None:
            return out
    return lt_linear_reference(x, weight, bias, weight_kn)


def lt_linear_reference(x, weight, bias, weight_kn):
    """torch's op for the same product (on the GPU: cuBLASLt's heuristic's first algorithm)."""
    wt = weight if weight_kn else weight.t()
    return torch.mm(x, wt) if bias is None else torch.addmm(bias, x, wt)


def _lt_linear_stored(x, weight, bias, weight_kn, table, version, gpu):
    """The product on the stored algorithm, or None where it may not run here."""
    from lamp_ros.kernels import cublaslt
    algo = table_algorithm(table, x.shape[0])
    if algo is None or x.dtype != torch.bfloat16:
        return None
    try:
        if cublaslt.identity(x.device) != {'cublaslt': version, 'gpu': gpu}:
            return None
    except cublaslt.CublasLtError:  # no cuBLASLt to be found in this process: torch's op
        return None
    k = x.shape[1]
    n = weight.shape[1] if weight_kn else weight.shape[0]
    plan = cublaslt.plan_for(cublaslt.GemmSpec(x.shape[0], n, k,
                                               'none' if bias is None else 'bias',
                                               weight_kn=weight_kn))
    if not plan.supports(algo):
        return None
    out = x.new_empty((x.shape[0], n))
    workspace = torch.empty(algo.workspace, dtype=torch.uint8, device=x.device)
    plan.run(algo, x.contiguous(), weight.contiguous(), out, workspace, bias=bias,
             stream=torch.cuda.current_stream(x.device).cuda_stream)
    return out


@lt_linear.register_fake
def _(x, weight, bias, weight_kn, table, cublaslt, gpu):
    return x.new_empty((x.shape[0], weight.shape[1] if weight_kn else weight.shape[0]))


OPERATORS = ('lamp::rms_norm', 'lamp::layer_norm', 'lamp::add_norm', 'lamp::rope',
             'lamp::rope_qk', 'lamp::geglu', 'lamp::fp8_rows', 'lamp::rms_norm_fp8',
             'lamp::add_rms_norm_fp8', 'lamp::geglu_fp8', 'lamp::masked_softmax',
             'lamp::ada_linear', 'lamp::ada_geglu', 'lamp::gated_linear', 'lamp::mqa_attention',
             'lamp::mqa_flash', 'lamp::lt_linear')
