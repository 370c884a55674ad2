"""The expert's adaRMS-normed GEMMs (qkv; gate/up with their GeGLU) as plain weight streams.

An adaRMS norm before a linear is linear in x once rstd(x) is known:

    norm(x) @ W^T = rstd(x) * ((x * mod) @ W^T) + shift @ W^T

`lamp::ada_linear` (triton_expert_gemm) makes x * mod and the sum of squares in its K loop, so
every activation tile goes from shared memory to registers and back before the MMA reads it: at the
expert's qkv that prologue cost about a third of the kernel's time, and it lost to an rms_norm
kernel plus cuBLAS. Here the kernel that writes x (the gated GEMM before: o for the MLP's norm, the
previous layer's down for the attention's; `norm_pieces` for the first layer) also writes x * mod
and each row's sum of squares in pieces (one per column block, summed here in a fixed order, so the
result does not depend on timing), and this GEMM is a plain stream: weight and activation tiles by
tensor descriptor (TMA: one bulk copy each a pipeline stage), straight into the MMA, rstd, the bias
and the GeGLU in the epilogue, faster than norm + cuBLAS at qkv and than norm + cuBLAS + GeGLU at
gate/up (docs/notebook/).

tiles = (block_w, block_k, warps, stages, swap[, pdl]): block_w weight rows a program, all of
K, the action tokens (<= 64) as one block; swap puts the weight block on the MMA's M side.

The qkv GEMM may also rotate q and k (RoPE) and scale q in its epilogue (`rope=`): a program then
takes the same block_w / 2 dims of both halves of one head, so each output meets its rotation
partner in the accumulator, and the attention reads q and k as they are (the qkv GEMM a little
slower, the attention faster by more: docs/notebook/).
"""

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from lamp_ros.kernels.triton_kernels import dot_precision as _precision
from lamp_ros.kernels.triton_kernels import gelu_tanh as _gelu_tanh
from lamp_ros.kernels.triton_kernels import grid_dependency as _grid_dependency
from lamp_ros.kernels.triton_kernels import pdl_launch as _pdl_launch
from lamp_ros.kernels.triton_kernels import rows as _rows
from lamp_ros.kernels.tuning import token_block


@triton.jit
def _premade_kernel(w_desc, w2_desc, x_desc, y_ptr, bias_ptr, bias2_ptr, pieces_ptr, M, N, K,
                    stride_y, stride_pieces, eps, cos_ptr, sin_ptr, rot_heads, scaled_heads,
                    q_scale, GEGLU: tl.constexpr, PIECES: tl.constexpr,
                    SWAP: tl.constexpr, PRECISION: tl.constexpr, BW: tl.constexpr,
                    BT: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr,
                    PDL: tl.constexpr = 0, ROPE: tl.constexpr = 0, HALF: tl.constexpr = 1):
    """Program i: weight rows i*BW.. (and the up weight's, GEGLU) against all tokens over all
    of K. The token tile's rows past M are the copy engine's zero fill.

    ROPE (qkv): program i takes BW/2 dims of each half of one head (HALF dims a half), its
    weight rows as one (2, BW/2, BK) box of the weight viewed (heads * 2, HALF, K), so that
    each output pairs with its RoPE partner in the epilogue; heads < rot_heads are rotated by
    cos/sin (rows, HALF) float32, heads < scaled_heads (the queries) then scaled by q_scale."""
    _grid_dependency(PDL, 1)
    pid = tl.program_id(0)
    toks = tl.arange(0, BT)
    if ROPE:
        HB: tl.constexpr = BW // 2
        head = pid // (HALF // HB)
        d0 = (pid % (HALF // HB)) * HB
        dims = d0 + tl.arange(0, HB)
        cols = head * 2 * HALF + dims  # the first half's columns; the second's are + HALF
        rot_at = toks[:, None] * HALF + dims[None, :]
        cos = tl.load(cos_ptr + rot_at, mask=(toks < M)[:, None], other=1.0)
        sin = tl.load(sin_ptr + rot_at, mask=(toks < M)[:, None], other=0.0)
        bias = tl.load(bias_ptr + cols)
        bias_hi = tl.load(bias_ptr + cols + HALF)
    else:
        cols = pid * BW + tl.arange(0, BW)
    # the epilogue's inputs first: they do not wait for the loop, and a trip for them after it
    # would add a round trip to every program
    pieces = tl.load(pieces_ptr + tl.arange(0, PIECES)[:, None] * stride_pieces
                     + toks[None, :], mask=(toks < M)[None, :], other=0.0)
    if not ROPE:
        bias = tl.load(bias_ptr + cols)
    if GEGLU:
        bias2 = tl.load(bias2_ptr + cols)
    if SWAP:
        acc = tl.zeros((BW, BT), dtype=tl.float32)
        acc2 = tl.zeros((BW, BT), dtype=tl.float32)
    else:
        acc = tl.zeros((BT, BW), dtype=tl.float32)
        acc2 = tl.zeros((BT, BW), dtype=tl.float32)
    for k in tl.range(0, K, BK, num_stages=STAGES):
        x = x_desc.load([0, k])
        if ROPE:
            w = tl.reshape(w_desc.load([2 * head, d0, k]), (BW, BK))
        else:
            w = w_desc.load([pid * BW, k])
        if SWAP:
            acc = tl.dot(w, tl.trans(x), acc, input_precision=PRECISION)
        else:
            acc = tl.dot(x, tl.trans(w), acc, input_precision=PRECISION)
        if GEGLU:
            w2 = w2_desc.load([pid * BW, k])
            if SWAP:
                acc2 = tl.dot(w2, tl.trans(x), acc2, input_precision=PRECISION)
            else:
                acc2 = tl.dot(x, tl.trans(w2), acc2, input_precision=PRECISION)
    _grid_dependency(PDL, 2)
    if SWAP:
        acc = tl.trans(acc)
        acc2 = tl.trans(acc2)
    rstd = tl.rsqrt(tl.sum(pieces, axis=0) / K + eps)
    if ROPE:  # acc's columns: BW/2 dims of the head's first half, then the same of its second
        lo, hi = tl.split(tl.permute(tl.reshape(acc, (BT, 2, HB)), (0, 2, 1)))
        lo = lo * rstd[:, None] + bias[None, :]
        hi = hi * rstd[:, None] + bias_hi[None, :]
        rotated = head < rot_heads  # else cos 1, sin 0: the values pass unchanged
        cos = tl.where(rotated, cos, 1.0)
        sin = tl.where(rotated, sin, 0.0)
        scale = tl.where(head < scaled_heads, q_scale, 1.0)
        lo, hi = (lo * cos - hi * sin) * scale, (hi * cos + lo * sin) * scale
        at = y_ptr + toks[:, None] * stride_y + cols[None, :]
        ok = toks[:, None] < M
        tl.store(at, lo.to(y_ptr.dtype.element_ty), mask=ok)
        tl.store(at + HALF, hi.to(y_ptr.dtype.element_ty), mask=ok)
    else:
        y = acc * rstd[:, None] + bias[None, :]
        if GEGLU:
            y = _gelu_tanh(y) * (acc2 * rstd[:, None] + bias2[None, :])
        ok = (toks[:, None] < M) & (cols[None, :] < N)
        tl.store(y_ptr + toks[:, None] * stride_y + cols[None, :],
                 y.to(y_ptr.dtype.element_ty), mask=ok)


def premade_gemm(xm, pieces, weight, bias, eps, tiles, weight2=None, bias2=None, rope=None):
    """rstd * (xm @ W^T) + bias [GeGLU'd with the same of W2] -> (..., N); see the module doc.
    xm (..., K) is x * mod as the kernel before stored it, pieces (P, rows) float32 the pieces
    of each row's sum of squares of x, bias (N,) float32 the shift pushed through W.

    rope = (cos, sin, heads, q_scale) for a q/k/v weight of heads + 2 heads: q and k come out
    rotated by cos/sin (..., d/2), q also scaled by q_scale (the attention after it reads
    them as they are: triton_attention.mqa_attention_rotated)."""
    block_w, block_k, warps, stages, swap = tiles[:5]
    pdl = tiles[5] if len(tiles) > 5 else 0
    a, w = _rows(xm), _rows(weight)
    m, k = a.shape
    n = w.shape[0]
    bt = token_block(m)
    if m > 64 or n % block_w or k % block_k:
        raise ValueError(f'premade_gemm: {m} rows x K={k} -> N={n} does not tile by '
                         f'{block_w} x {block_k} (at most 64 rows)')
    out = torch.empty((m, n), dtype=xm.dtype, device=xm.device)
    bias = bias.float().contiguous()
    rot = dict(cos_ptr=bias, sin_ptr=bias, rot_heads=0, scaled_heads=0, q_scale=1.0)
    if rope is None:
        w_desc = TensorDescriptor.from_tensor(w, [block_w, block_k])
    else:
        cos, sin, heads, q_scale = rope
        half = n // (heads + 2) // 2
        if weight2 is not None or n != (heads + 2) * 2 * half or half % (block_w // 2):
            raise ValueError(f'premade_gemm: rope wants q/k/v of {heads} heads whose half '
                             f'head tiles by {block_w // 2} rows, not N={n}')
        # one box (2, block_w / 2, block_k): the same dims of both halves of a head
        w_desc = TensorDescriptor.from_tensor(w.view(n // half, half, k),
                                              [2, block_w // 2, block_k])
        rot = dict(cos_ptr=cos.float().reshape(m, half).contiguous(),
                   sin_ptr=sin.float().reshape(m, half).contiguous(), rot_heads=heads + 1,
                   scaled_heads=heads, q_scale=q_scale, ROPE=1, HALF=half)
    w2_desc = TensorDescriptor.from_tensor(_rows(weight2), [block_w, block_k]) \
        if weight2 is not None else w_desc
    _premade_kernel[(n // block_w,)](
        w_desc, w2_desc, TensorDescriptor.from_tensor(a, [bt, block_k]), out, bias,
        bias2.float().contiguous() if bias2 is not None else bias, pieces, m, n, k,
        out.stride(0), pieces.stride(0), eps, GEGLU=weight2 is not None,
        PIECES=pieces.shape[0], SWAP=bool(swap), PRECISION=_precision(xm.dtype), BW=block_w,
        BT=bt, BK=block_k, STAGES=stages, PDL=pdl, num_warps=warps, **rot, **_pdl_launch(pdl))
    return out.view(*xm.shape[:-1], n)


@triton.jit
def _norm_pieces_kernel(x_ptr, mod_ptr, xm_ptr, pieces_ptr, stride_x, stride_xm,
                        stride_pieces, N: tl.constexpr, PIECES: tl.constexpr,
                        PDL: tl.constexpr = 0):
    """One row per program: x * mod and the row's sum of squares in PIECES column blocks."""
    _grid_dependency(PDL, 1)
    row = tl.program_id(0)
    cols = tl.arange(0, N)
    x = tl.load(x_ptr + row * stride_x + cols).to(tl.float32)
    mod = tl.load(mod_ptr + cols)
    tl.store(xm_ptr + row * stride_xm + cols, (x * mod).to(xm_ptr.dtype.element_ty))
    sq = tl.sum(tl.reshape(x * x, (PIECES, N // PIECES)), axis=1)
    tl.store(pieces_ptr + tl.arange(0, PIECES) * stride_pieces + row, sq)


def norm_pieces(x, mod, pieces: int, pdl=0):
    """(x * mod, pieces (pieces, rows) of each row's sum of squares): what premade_gemm reads,
    for a GEMM whose input no gated GEMM made (the expert's first layer). The width must be a
    power of two split in `pieces` equal blocks."""
    a = _rows(x)
    m, n = a.shape
    if n & (n - 1) or n % pieces:
        raise ValueError(f'norm_pieces: width {n} is not a power of two in {pieces} blocks')
    xm = torch.empty((m, n), dtype=x.dtype, device=x.device)
    out = torch.empty((pieces, m), dtype=torch.float32, device=x.device)
    _norm_pieces_kernel[(m,)](a, mod.float().contiguous(), xm, out, a.stride(0), xm.stride(0),
                              out.stride(0), N=n, PIECES=pieces, PDL=min(pdl, 1),
                              num_warps=4, **_pdl_launch(pdl))
    return xm.view(x.shape), out
