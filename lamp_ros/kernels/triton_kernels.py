"""Triton kernels behind the `lamp::*` operators (operators/): one read, one write per activation.

Rows are the flattened leading dims. Each kernel loads in the input dtype, computes in float32
(as the reference does) and stores once in the output dtype. Block sizes follow the shapes the
policy has (widths 1024-2048, head dim 256, MLP widths 4096-16384): a whole row per program for
the norms, one (token, head) per program for RoPE, 1024-wide column tiles for GeGLU.
"""


import torch
import triton
import triton.language as tl


def rows(x: torch.Tensor) -> torch.Tensor:
    """x as (rows, last dim) with unit stride along it, the layout every kernel here reads;
    views stay views (the q/k/v or gate/up slices of one merged GEMM's output)."""
    out = x.reshape(-1, x.shape[-1])
    return out if out.stride(1) == 1 else out.contiguous()


def dot_precision(dtype) -> str:
    """tl.dot's input precision: float32 groups keep IEEE products (tf32 would break their 1e-4
    parity)."""
    return 'ieee' if dtype == torch.float32 else 'tf32'


@triton.jit
def grid_dependency(PDL: tl.constexpr, WHERE: tl.constexpr):
    """Programmatic dependent launch (Hopper+), for kernels launched with launch_pdl: such a
    kernel may start while the kernel before it is still running, so at WHERE == 1 (its first
    line) it waits for that kernel to finish and its writes to be visible, before it touches
    memory at all (a write before the wait could race the previous kernel's reads of a reused
    buffer). It then lets the next kernel launch: at PDL == WHERE, 1 (at once) or 2 (the caller
    marks where, e.g. after its main loop, so the next kernel's waiting programs do not take
    SM slots from this one's). PDL == 0: nothing (plain stream order)."""
    if PDL:
        if WHERE == 1:
            tl.extra.cuda.gdc_wait()
        if PDL == WHERE:
            tl.extra.cuda.gdc_launch_dependents()


def pdl_launch(pdl: int) -> dict:
    """The launch option of grid_dependency's kernels (none when off, so a Triton without the
    option still runs them). The mode comes from the program (the spec's build.expert_pdl)."""
    return {'launch_pdl': True} if pdl else {}


@triton.jit
def unit_rms(x, n_cols, eps):
    """x / rms(x) of one float32 row (lanes past n_cols hold 0): the norm both the norm kernel
    and the FP8 rows' kernel apply."""
    return x * tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)


@triton.jit
def _norm_kernel(x_ptr, r_ptr, s_ptr, y_ptr, scale_ptr, shift_ptr, stride_x, stride_r, stride_s,
                 stride_y, n_cols, eps, MODULATE: tl.constexpr, ADD: tl.constexpr,
                 CENTER: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr = 0):
    """One row per program: [s = x + r, stored in x's dtype as the eager add rounds it], then
    the unit RMSNorm of it (CENTER: the LayerNorm without affine, the mean taken out first),
    [adaRMS modulation]. An RMSNorm and a LayerNorm differ by one line, so they share it."""
    grid_dependency(PDL, 1)
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    inside = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=inside, other=0.0)
    if ADD:
        r = tl.load(r_ptr + row * stride_r + cols, mask=inside, other=0.0)
        x = (x.to(tl.float32) + r.to(tl.float32)).to(s_ptr.dtype.element_ty)
        tl.store(s_ptr + row * stride_s + cols, x, mask=inside)
    x = x.to(tl.float32)
    if CENTER:
        x = tl.where(inside, x - tl.sum(x, axis=0) / n_cols, 0.0)
    y = unit_rms(x, n_cols, eps)
    if MODULATE:
        scale = tl.load(scale_ptr + cols, mask=inside, other=0.0).to(tl.float32)
        shift = tl.load(shift_ptr + cols, mask=inside, other=0.0).to(tl.float32)
        y = y * (1.0 + scale) + shift
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=inside)


def norm(x, eps, residual=None, center=False, scale=None, shift=None, pdl=0):
    """The norm of x (of x + residual when given) over the last dim -> normed, or
    (x + residual, normed) with a residual: one read of each input, one write of each output."""
    x2 = rows(x)
    r2 = rows(residual) if residual is not None else x2
    out = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
    total = torch.empty(x2.shape, dtype=x.dtype, device=x.device) if residual is not None \
        else out
    n = x2.shape[1]
    block = triton.next_power_of_2(n)
    modulate = scale is not None
    _norm_kernel[(x2.shape[0],)](
        x2, r2, total, out, scale if modulate else x2, shift if modulate else x2,
        x2.stride(0), r2.stride(0), total.stride(0), out.stride(0), n, eps, MODULATE=modulate,
        ADD=residual is not None, CENTER=center, BLOCK=block, PDL=min(pdl, 1),
        num_warps=8 if block >= 2048 else 4, **pdl_launch(pdl))
    if residual is None:
        return out.view(x.shape)
    return total.view(x.shape), out.view(x.shape)


def rms_norm(x, scale, shift, eps, pdl=0):
    return norm(x, eps, scale=scale, shift=shift, pdl=pdl)


@triton.jit
def _rope_kernel(x_ptr, y_ptr, x2_ptr, y2_ptr, cos_ptr, sin_ptr, stride_token, stride_head,
                 stride2_token, stride2_head, heads, heads2, half, BLOCK: tl.constexpr):
    """One (token, head) per program; heads past `heads` are a second tensor's (k beside q:
    one launch rotates both)."""
    token = tl.program_id(0)
    head = tl.program_id(1)
    cols = tl.arange(0, BLOCK)
    inside = cols < half
    if head < heads:
        src = x_ptr + token * stride_token + head * stride_head
        dst = y_ptr + (token * heads + head) * 2 * half
    else:
        src = x2_ptr + token * stride2_token + (head - heads) * stride2_head
        dst = y2_ptr + (token * heads2 + head - heads) * 2 * half
    x1 = tl.load(src + cols, mask=inside, other=0.0).to(tl.float32)
    x2 = tl.load(src + half + cols, mask=inside, other=0.0).to(tl.float32)
    cos = tl.load(cos_ptr + token * half + cols, mask=inside, other=0.0)
    sin = tl.load(sin_ptr + token * half + cols, mask=inside, other=0.0)
    dtype = y_ptr.dtype.element_ty
    tl.store(dst + cols, (x1 * cos - x2 * sin).to(dtype), mask=inside)
    tl.store(dst + half + cols, (x2 * cos + x1 * sin).to(dtype), mask=inside)


def _token_rows(x):
    """x (b, n, heads, d) with unit stride along d and tokens evenly spaced (views of a merged
    GEMM's output are), else a contiguous copy."""
    b, n, _, _ = x.shape
    return x if x.stride(3) == 1 and x.stride(0) == n * x.stride(1) else x.contiguous()


def rope(x, cos, sin, x2=None):
    """x (and x2, the same tokens' other heads) rotated -> contiguous copies: one launch."""
    x = _token_rows(x)
    x2 = _token_rows(x2) if x2 is not None else None
    b, n, heads, d = x.shape
    cos, sin = cos.float().contiguous(), sin.float().contiguous()
    out = torch.empty((b, n, heads, d), dtype=x.dtype, device=x.device)
    out2 = torch.empty(x2.shape, dtype=x2.dtype, device=x2.device) if x2 is not None else out
    other = x2 if x2 is not None else x
    heads2 = x2.shape[2] if x2 is not None else 0
    half = d // 2
    _rope_kernel[(b * n, heads + heads2)](
        x, out, other, out2, cos, sin, x.stride(1), x.stride(2), other.stride(1),
        other.stride(2), heads, heads2, half, BLOCK=triton.next_power_of_2(half), num_warps=2)
    return out if x2 is None else (out, out2)


@triton.jit
def gelu_tanh(g):
    """gelu with the tanh approximation, as 0.5 g (1 + tanh z) = g sigmoid(2z)."""
    z = 0.7978845608028654 * (g + 0.044715 * g * g * g)
    return g * tl.sigmoid(2.0 * z)


@triton.jit
def _geglu_kernel(gate_ptr, up_ptr, y_ptr, stride_gate, stride_up, n_cols,
                  BLOCK: tl.constexpr, PDL: tl.constexpr = 0):
    grid_dependency(PDL, 1)
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = cols < n_cols
    g = tl.load(gate_ptr + row * stride_gate + cols, mask=inside, other=0.0).to(tl.float32)
    u = tl.load(up_ptr + row * stride_up + cols, mask=inside, other=0.0).to(tl.float32)
    y = gelu_tanh(g) * u
    tl.store(y_ptr + row * n_cols + cols, y.to(y_ptr.dtype.element_ty), mask=inside)


def geglu(gate, up, pdl=0):
    g, u = rows(gate), rows(up)
    m, n = g.shape
    out = torch.empty((m, n), dtype=gate.dtype, device=gate.device)
    block = 1024
    _geglu_kernel[(m, triton.cdiv(n, block))](g, u, out, g.stride(0), u.stride(0), n,
                                              BLOCK=block, PDL=min(pdl, 1), num_warps=4,
                                              **pdl_launch(pdl))
    return out.view(gate.shape)


@triton.jit
def _fp8_rows_kernel(x_ptr, up_ptr, r_ptr, s_ptr, codes_ptr, scale_ptr, stride_x, stride_up,
                     stride_r, n_cols, eps, GEGLU: tl.constexpr, NORM: tl.constexpr,
                     ADD: tl.constexpr, BLOCK: tl.constexpr, EVICT: tl.constexpr):
    """One row per program: the row (or gelu_tanh(gate) * up, or the row's unit RMSNorm
    rounded to the row's dtype as the norm kernel stores it; with ADD the norm of x + r, the
    sum stored in x's dtype as the eager add rounds it) in float32, its power-of-two scale
    from the largest magnitude's exponent bits (ops.fp8_scale: amax / scale in (224, 448]),
    then the codes, rounded to nearest even by the cast."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    inside = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=inside, other=0.0,
                eviction_policy=EVICT).to(tl.float32)
    if ADD:
        r = tl.load(r_ptr + row * stride_r + cols, mask=inside, other=0.0).to(tl.float32)
        total = (x + r).to(s_ptr.dtype.element_ty)
        tl.store(s_ptr + row * n_cols + cols, total, mask=inside)
        x = total.to(tl.float32)
    if GEGLU:
        u = tl.load(up_ptr + row * stride_up + cols, mask=inside, other=0.0,
                    eviction_policy=EVICT).to(tl.float32)
        x = gelu_tanh(x) * u
    if NORM:
        x = unit_rms(x, n_cols, eps)
        x = x.to(x_ptr.dtype.element_ty).to(tl.float32)
    amax = tl.maximum(tl.max(tl.abs(x), axis=0), 7.888609052210118e-31)  # 2^-100
    bits = amax.to(tl.int32, bitcast=True)
    e = ((bits >> 23) & 0xFF) - 127 - 8 + ((bits & 0x7FFFFF) > 0x600000).to(tl.int32)
    scale = ((e + 127) << 23).to(tl.float32, bitcast=True)
    tl.store(scale_ptr + row, scale)
    codes = x * ((127 - e) << 23).to(tl.float32, bitcast=True)  # x / scale, exactly
    tl.store(codes_ptr + row * n_cols + cols, codes.to(codes_ptr.dtype.element_ty), mask=inside)


def fp8_rows(x, up=None, eps=None, residual=None, warps=None, evict=''):
    """x (..., K) [GeGLU'd with up] [plus residual, then RMS-normed with eps] -> (codes (..., K)
    float8_e4m3fn, scale (..., 1) float32), with a residual (x + residual, codes, scale); see
    ops.fp8_rows. `warps` and `evict` (the loads' L2 eviction policy) are kept for timing
    other launches of the kernel; the artifact uses neither (docs/notebook/)."""
    a = rows(x)
    u = rows(up) if up is not None else a
    r = rows(residual) if residual is not None else a
    m, n = a.shape
    codes = torch.empty((m, n), dtype=torch.float8_e4m3fn, device=x.device)
    scale = torch.empty((m, 1), dtype=torch.float32, device=x.device)
    total = torch.empty((m, n), dtype=x.dtype, device=x.device) if residual is not None else a
    block = triton.next_power_of_2(n)
    _fp8_rows_kernel[(m,)](a, u, r, total, codes, scale, a.stride(0), u.stride(0), r.stride(0),
                           n, 0.0 if eps is None else eps, GEGLU=up is not None,
                           NORM=eps is not None, ADD=residual is not None, BLOCK=block,
                           EVICT=evict, num_warps=warps or max(4, min(16, block // 1024)))
    out = codes.view(*x.shape), scale.view(*x.shape[:-1], 1)
    return out if residual is None else (total.view(x.shape), *out)


@triton.jit
def _masked_softmax_kernel(s_ptr, mask_ptr, p_ptr, n_cols, heads, scale, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    inside = cols < n_cols
    s = tl.load(s_ptr + row * n_cols + cols, mask=inside, other=0.0).to(tl.float32) * scale
    keep = tl.load(mask_ptr + (row // heads) * n_cols + cols, mask=inside, other=0)
    s = tl.where(keep != 0, s, -3.4028234663852886e38)  # the eager code's finite fill
    s = tl.where(inside, s, float('-inf'))
    e = tl.exp(s - tl.max(s, axis=0))
    p = e / tl.sum(e, axis=0)
    tl.store(p_ptr + row * n_cols + cols, p.to(p_ptr.dtype.element_ty), mask=inside)


@triton.jit
def _letterbox_kernel(frame_ptr, geometry_ptr, out_ptr, size, BLOCK: tl.constexpr):
    """One output row of one camera's letterbox (ops/letterbox.py): lane l is column l // 3,
    channel l % 3; four byte gathers and integer sums, as INTER_LINEAR_EXACT computes them."""
    row = tl.program_id(0)
    r = geometry_ptr + row * 4  # the rows' table first, then the columns'
    r0, r1 = tl.load(r), tl.load(r + 1)
    wy, row_valid = tl.load(r + 2), tl.load(r + 3)
    lane = tl.arange(0, BLOCK)
    live = lane < size * 3
    col, channel = lane // 3, lane % 3
    c = geometry_ptr + (size + col) * 4
    c0 = tl.load(c, mask=live, other=0) + channel
    c1 = tl.load(c + 1, mask=live, other=0) + channel
    wx = tl.load(c + 2, mask=live, other=0)
    valid = (tl.load(c + 3, mask=live, other=0) * row_valid) != 0
    on = live & valid
    s00 = tl.load(frame_ptr + r0 + c0, mask=on, other=0).to(tl.int32)
    s01 = tl.load(frame_ptr + r0 + c1, mask=on, other=0).to(tl.int32)
    s10 = tl.load(frame_ptr + r1 + c0, mask=on, other=0).to(tl.int32)
    s11 = tl.load(frame_ptr + r1 + c1, mask=on, other=0).to(tl.int32)
    top = s00 * (256 - wx) + s01 * wx
    bottom = s10 * (256 - wx) + s11 * wx
    value = (top * (256 - wy) + bottom * wy + 32768) >> 16
    value = tl.where(on, value, 0)
    tl.store(out_ptr + row * size * 3 + lane, value.to(tl.uint8), mask=live)


def letterbox(frames, geometry):
    """frames: one flat uint8 tensor per camera; geometry (1, cams, 2, size, 4) int32 ->
    (1, cams, size, size, 3) uint8. One launch per camera (each reads its own buffer)."""
    size = geometry.shape[-2]
    geometry = geometry.contiguous()
    out = torch.empty((1, len(frames), size, size, 3), dtype=torch.uint8,
                      device=geometry.device)
    block = triton.next_power_of_2(size * 3)
    for i, frame in enumerate(frames):
        _letterbox_kernel[(size,)](frame, geometry[0, i], out[0, i], size, BLOCK=block,
                                   num_warps=4)
    return out


def masked_softmax(scores, mask, heads, scale):
    scores = scores.contiguous()
    keep = mask.contiguous().view(torch.uint8)
    n = scores.shape[-1]
    out = torch.empty_like(scores)
    block = triton.next_power_of_2(n)
    _masked_softmax_kernel[(scores.numel() // n,)](scores, keep, out, n, heads, scale,
                                                   BLOCK=block,
                                                   num_warps=8 if block >= 2048 else 4)
    return out
