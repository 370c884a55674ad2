"""Triton kernels of the action expert's layer: four GEMMs and one attention, nothing between.

The expert runs its 18 layers 10 times per inference on 50 rows. At that size each GEMM is a
stream of its weights (M = 50 is far below the GPU's compute knee), so what costs is every extra
launch and every extra round trip of the activations. One layer is five launches here:

    qkv   = rstd(x) * ((x * mod) @ Wqkv^T) + bias    (adaRMS norm folded into the GEMM)
    a     = attention(qkv, prefix K/V)                 (RoPE, both K/V sources, mask, softmax)
    x     = x + gate * (a @ Wo^T)                      (gated residual in the epilogue)
    h     = gelu(rstd(x) * ((x*mod) @ Wg^T) + bg) * (rstd(x) * ((x*mod) @ Wu^T) + bu)
    x     = x + gate * (h @ Wd^T)

The adaRMS norm is linear in x once rstd is known, so it moves through the GEMM: the shift
becomes a bias (shift @ W^T, per Euler step, precomputed by the lowering) and rstd is summed in
the same loop that streams the weights. Tile sizes are arguments: the lowering measures a few per
GEMM shape on the GPU and stores the winner in the exported program (kernels/tuning.py).
"""

import torch
import triton
import triton.language as tl

from lamp_ros.kernels.operators import LOG2E  # noqa: F401  (also triton_expert.LOG2E)
from lamp_ros.kernels.triton_kernels import dot_precision as _precision
from lamp_ros.kernels.triton_kernels import gelu_tanh as _gelu_tanh
from lamp_ros.kernels.triton_kernels import grid_dependency as _grid_dependency
from lamp_ros.kernels.triton_kernels import pdl_launch as _pdl_launch
from lamp_ros.kernels.triton_kernels import rows as _rows

FILL = tl.constexpr(-3.4028234663852886e38)  # the eager code's finite fill for masked logits


@triton.jit
def _expert_gemm_kernel(x_ptr, w_ptr, w2_ptr, x_desc, w_desc, y_ptr, mod_ptr, bias_ptr,
                        bias2_ptr, res_ptr, gate_ptr, part_ptr, part2_ptr, sumsq_ptr,
                        count_ptr, xm_ptr,
                        mod_next_ptr, pieces_ptr, M, N, K, k_per_split, stride_x, stride_w,
                        stride_w2, stride_y, stride_res, stride_pieces, eps,
                        NORM: tl.constexpr, GEGLU: tl.constexpr, RESIDUAL: tl.constexpr,
                        GATED: tl.constexpr, SPLITS: tl.constexpr, SWAP: tl.constexpr,
                        PRECISION: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                        BK: tl.constexpr, PDL: tl.constexpr = 0, PREP: tl.constexpr = 0,
                        TMA: tl.constexpr = 0):
    _grid_dependency(PDL, 1)
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    split = tl.program_id(2)
    rows = pid_m * BM + tl.arange(0, BM)
    cols = pid_n * BN + tl.arange(0, BN)
    ks = tl.arange(0, BK)
    row_ok = rows < M
    col_ok = cols < N
    k_start = split * k_per_split
    x_ptrs = x_ptr + rows[:, None] * stride_x + (k_start + ks)[None, :]
    w_ptrs = w_ptr + cols[:, None] * stride_w + (k_start + ks)[None, :]
    w2_ptrs = w2_ptr + cols[:, None] * stride_w2 + (k_start + ks)[None, :]
    if SWAP:  # the weight block is the MMA's M side (64+ rows), the tokens its N side
        acc = tl.zeros((BN, BM), dtype=tl.float32)
        acc2 = tl.zeros((BN, BM), dtype=tl.float32)
    else:
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        acc2 = tl.zeros((BM, BN), dtype=tl.float32)
    sumsq = tl.zeros((BM,), dtype=tl.float32)
    for k0 in range(k_start, k_start + k_per_split, BK):
        if TMA:  # by tensor descriptor (x_desc, w_desc: (BM, BK) and (BN, BK) boxes)
            x = x_desc.load([pid_m * BM, k0])
        else:
            x = tl.load(x_ptrs, mask=row_ok[:, None], other=0.0)
        if NORM:
            xf = x.to(tl.float32)
            sumsq += tl.sum(xf * xf, axis=1)
            x = (xf * tl.load(mod_ptr + k0 + ks)[None, :]).to(w_ptr.dtype.element_ty)
        if TMA:
            w = w_desc.load([pid_n * BN, k0])
        else:
            w = tl.load(w_ptrs, mask=col_ok[:, None], other=0.0)
        if SWAP:
            acc = tl.dot(w, tl.trans(x), acc, input_precision=PRECISION)
        else:
            acc = tl.dot(x, tl.trans(w), acc, input_precision=PRECISION)
        if GEGLU:
            w2 = tl.load(w2_ptrs, mask=col_ok[:, None], other=0.0)
            if SWAP:
                acc2 = tl.dot(w2, tl.trans(x), acc2, input_precision=PRECISION)
            else:
                acc2 = tl.dot(x, tl.trans(w2), acc2, input_precision=PRECISION)
            w2_ptrs += BK
        x_ptrs += BK
        w_ptrs += BK
    _grid_dependency(PDL, 2)
    if SWAP:  # back to (rows, columns) for the epilogue
        acc = tl.trans(acc)
        acc2 = tl.trans(acc2)
    last = True
    if SPLITS > 1:
        # Split-K: every split leaves its partial sums; the last split of a tile to finish (an
        # atomic counter, reset by it for the next call) adds them up in split order, so the
        # result does not depend on which split came last, and runs the epilogue. The sum is
        # unrolled over the compile-time split count, so its loads are all in flight at once
        # (a loop over a runtime count waited for each in turn: one L2 round trip per split).
        tile = pid_m * tl.num_programs(0) + pid_n
        tiles = tl.num_programs(0) * tl.num_programs(1)
        here = (split * tiles + tile) * BM * BN + tl.arange(0, BM)[:, None] * BN \
            + tl.arange(0, BN)[None, :]
        tl.store(part_ptr + here, acc)
        if GEGLU:
            tl.store(part2_ptr + here, acc2)
        if NORM:
            tl.store(sumsq_ptr + (split * tiles + tile) * BM + tl.arange(0, BM), sumsq)
        tl.debug_barrier()
        done = tl.atomic_add(count_ptr + tile, 1, sem='acq_rel')
        last = done == SPLITS - 1
        if last:
            acc = tl.zeros((BM, BN), dtype=tl.float32)
            acc2 = tl.zeros((BM, BN), dtype=tl.float32)
            sumsq = tl.zeros((BM,), dtype=tl.float32)
            for s in tl.static_range(SPLITS):
                there = here + (s - split) * tiles * BM * BN
                acc += tl.load(part_ptr + there, cache_modifier='.cg')
                if GEGLU:
                    acc2 += tl.load(part2_ptr + there, cache_modifier='.cg')
                if NORM:
                    sumsq += tl.load(sumsq_ptr + (s * tiles + tile) * BM + tl.arange(0, BM),
                                     cache_modifier='.cg')
            tl.atomic_xchg(count_ptr + tile, 0)
    if last:
        if NORM:
            rstd = tl.rsqrt(sumsq / K + eps)
            acc = acc * rstd[:, None] + tl.load(bias_ptr + cols, mask=col_ok, other=0.0)[None, :]
            if GEGLU:
                acc2 = acc2 * rstd[:, None] + tl.load(bias2_ptr + cols, mask=col_ok,
                                                      other=0.0)[None, :]
        if GEGLU:
            acc = _gelu_tanh(acc) * acc2
        inside = row_ok[:, None] & col_ok[None, :]
        if RESIDUAL:
            res = tl.load(res_ptr + rows[:, None] * stride_res + cols[None, :], mask=inside,
                          other=0.0).to(tl.float32)
            if GATED:
                acc = acc * tl.load(gate_ptr + cols, mask=col_ok,
                                    other=0.0).to(tl.float32)[None, :]
            acc = res + acc
        out = acc.to(y_ptr.dtype.element_ty)
        tl.store(y_ptr + rows[:, None] * stride_y + cols[None, :], out, mask=inside)
        if PREP:  # what the next adaRMS-normed GEMM reads (triton_premade): x * mod, and
            # this tile's share of each row's sum of squares, both of x as stored
            of = tl.where(inside, out.to(tl.float32), 0.0)
            mod_next = tl.load(mod_next_ptr + cols, mask=col_ok, other=0.0)
            tl.store(xm_ptr + rows[:, None] * stride_y + cols[None, :],
                     (of * mod_next[None, :]).to(y_ptr.dtype.element_ty), mask=inside)
            tl.store(pieces_ptr + pid_n * stride_pieces + rows, tl.sum(of * of, axis=1),
                     mask=row_ok)


def expert_gemm(x, weight, tiles, *, counters=None, weight2=None, mod=None, bias=None,
                bias2=None, residual=None, gate=None, eps=0.0, mod_next=None):
    """One launch of `_expert_gemm_kernel` over x (..., K) -> (..., N); see the module doc.

    tiles = (block_m, block_n, block_k, warps, stages, splits, swap): block_m rows of x by
    block_n rows of the weight per program. With splits > 1, K is cut into that many slices, one
    program each, and `counters` (int32 zeros, one per output tile; left zero again by the
    kernel) tells the last slice of a tile to finish. swap = 1 computes the block transposed
    (W_block @ x_block^T, the weight as the MMA's M side): at 50 rows a 64-128-row weight block
    then costs fewer re-reads of x per weight byte than 16-32 columns of W with x as M. (On the
    H200 this helped the norm-fused parts by 13-20% and lost every part to cuBLAS or the
    unswapped tilings: the tuner decides.) An optional eighth value turns on programmatic
    dependent launch (triton_kernels.grid_dependency: 1 or 2; 0 or absent: off), and an
    optional ninth, 1, loads x and the (first) weight by tensor descriptor (TMA: the copy
    engine moves each (block, block_k) box, zero-filling rows past the end) instead of pointer
    loads: the same numbers bit for bit, and on the H200 0.7 us a layer less for o and down
    together in one Euler step (scripts/device/expert_chain.py, 'tmagemm'; Hopper and later).

    With mod_next (float32 (N,)), the epilogue also makes what the next adaRMS-normed GEMM
    on descriptor loads reads (triton_premade.premade_gemm): returns (y, y * mod_next rounded
    to y's dtype, pieces): pieces (N / block_n, M) float32, piece j the sum of squares of y's
    rows over column block j."""
    block_m, block_n, block_k, warps, stages, splits, swap = tiles[:7]
    pdl = tiles[7] if len(tiles) > 7 else 0
    tma = len(tiles) > 8 and tiles[8] == 1
    a, w = _rows(x), _rows(weight)
    m, k = a.shape
    n = w.shape[0]
    if k % (block_k * splits):
        raise ValueError(f'expert_gemm: K={k} is not a multiple of {splits} splits of '
                         f'{block_k}')
    grid = (triton.cdiv(n, block_n), triton.cdiv(m, block_m), splits)
    f32 = dict(dtype=torch.float32, device=x.device)
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    part = part2 = sumsq = out
    if splits > 1:
        tiles_mn = grid[0] * grid[1]
        if counters is None or counters.numel() < tiles_mn or counters.dtype != torch.int32:
            raise ValueError(f'expert_gemm: {splits} splits need int32 counters for '
                             f'{tiles_mn} tiles')
        part = torch.empty((splits, tiles_mn, block_m, block_n), **f32)
        part2 = torch.empty_like(part) if weight2 is not None else part
        sumsq = torch.empty((splits, tiles_mn, block_m), **f32)
    w2 = _rows(weight2) if weight2 is not None else w
    res = _rows(residual) if residual is not None else out
    mod = mod.float().contiguous() if mod is not None else None
    xm = pieces = out
    if mod_next is not None:
        xm = torch.empty_like(out)
        pieces = torch.empty((grid[0], m), **f32)
    xd, wd = a, w
    if tma:  # x and the (first) weight by tensor descriptor
        from triton.tools.tensor_descriptor import TensorDescriptor
        xd = TensorDescriptor.from_tensor(a, [block_m, block_k])
        wd = TensorDescriptor.from_tensor(w, [block_n, block_k])
    _expert_gemm_kernel[grid](
        a, w, w2, xd, wd, out, mod if mod is not None else out,
        bias.float().contiguous() if bias is not None else out,
        bias2.float().contiguous() if bias2 is not None else out, res,
        gate.contiguous() if gate is not None else out, part, part2, sumsq,
        counters if splits > 1 else out, xm,
        mod_next.float().contiguous() if mod_next is not None else out, pieces, m, n, k,
        k // splits, a.stride(0), w.stride(0), w2.stride(0), out.stride(0), res.stride(0),
        pieces.stride(0), eps, NORM=mod is not None, PREP=mod_next is not None, TMA=tma,
        GEGLU=weight2 is not None, RESIDUAL=residual is not None, GATED=gate is not None,
        SPLITS=splits, SWAP=bool(swap), PRECISION=_precision(x.dtype), BM=block_m,
        BN=block_n, BK=block_k, PDL=pdl,
        num_warps=warps, num_stages=stages, **_pdl_launch(pdl))
    y = out.view(*x.shape[:-1], n)
    if mod_next is not None:
        return y, xm.view(*x.shape[:-1], n), pieces
    return y


@triton.jit
def softmax_block(s, keep, key_ok, m_i, l_i):
    """The online softmax over one block of scores s (rows, keys; log2 units, float32): masked
    keys (keep == 0) get the eager code's finite fill, keys past the end -inf -> (new running
    max, the factor for what was summed before, the block's weights p, new running sum)."""
    s = tl.where(keep != 0, s, FILL)
    s = tl.where(key_ok[None, :], s, float('-inf'))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s - m_new[:, None])
    return m_new, alpha, p, l_i * alpha + tl.sum(p, axis=1)


@triton.jit
def _attend_block(q1, q2, k1, k2, v1, v2, keep, key_ok, m_i, l_i, acc1, acc2,
                  PRECISION: tl.constexpr):
    """One online-softmax step over a block of keys (scores already in log2 units)."""
    s = tl.dot(q1, tl.trans(k1), input_precision=PRECISION)
    s = tl.dot(q2, tl.trans(k2), s, input_precision=PRECISION)
    m_new, alpha, p, l_i = softmax_block(s, keep, key_ok, m_i, l_i)
    p = p.to(v1.dtype)
    acc1 = tl.dot(p, v1, acc1 * alpha[:, None], input_precision=PRECISION)
    acc2 = tl.dot(p, v2, acc2 * alpha[:, None], input_precision=PRECISION)
    return m_new, l_i, acc1, acc2


@triton.jit
def _mqa_kernel(q_ptr, kp_ptr, vp_ptr, cos_ptr, sin_ptr, mask_ptr, m_ptr, l_ptr, acc_ptr,
                out_ptr, n, T, heads, stride_q_b, stride_q_t, stride_kp_b, stride_kp_t,
                stride_vp_b, stride_vp_t, stride_m_b, stride_m_t, row_blocks, prefix_splits,
                keys_per_split, qk_scale,
                OWN: tl.constexpr, HALF: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                PRECISION: tl.constexpr, PDL: tl.constexpr = 0):
    """Rows = (token, head) pairs of q (token-major, as q's memory is) against one K/V head.

    OWN 1 (the expert): q_ptr is the raw qkv GEMM output; q and the tokens' own k are rotated
    here, and the last key split is the tokens' own K/V. OWN 2 (the expert after a qkv GEMM
    that rotated q and k itself): keys T.. are the tokens' own k/v in q_ptr's rows, read as
    they are, after the prefix's in one index space (T + n keys split evenly, no split of
    their own). OWN 0: q is already rotated and every key is in kp/vp (the prefix). With one
    split the program normalises and writes its rows; with more, each split leaves (max, sum,
    output) for `_mqa_combine_kernel`, as flash-decoding does. (Rotating a 64-key block of own
    keys holds four float32 (keys, d/2) tiles at once: 255 registers a thread and 58 spilled
    on the H200. Rotating 16 keys at a time removed the spills but made the kernel slower,
    16.8 -> 19.4 us: four serial blocks.)"""
    _grid_dependency(PDL, 1)
    pid = tl.program_id(0)
    split = tl.program_id(1)
    splits = tl.num_programs(1)
    b = pid // row_blocks
    rows_total = n * heads
    r = (pid % row_blocks) * BM + tl.arange(0, BM)
    r_ok = r < rows_total
    t = tl.where(r_ok, r // heads, 0)  # query token
    h = r % heads
    d = tl.arange(0, HALF)
    dtype = q_ptr.dtype.element_ty
    q_at = q_ptr + b * stride_q_b + t[:, None] * stride_q_t + h[:, None] * 2 * HALF
    q1 = tl.load(q_at + d[None, :], mask=r_ok[:, None], other=0.0).to(tl.float32)
    q2 = tl.load(q_at + HALF + d[None, :], mask=r_ok[:, None], other=0.0).to(tl.float32)
    if OWN == 1:  # RoPE on q here
        cs = (b * n + t)[:, None] * HALF + d[None, :]
        c = tl.load(cos_ptr + cs)
        s_ = tl.load(sin_ptr + cs)
        q1, q2 = q1 * c - q2 * s_, q2 * c + q1 * s_
    q1, q2 = (q1 * qk_scale).to(dtype), (q2 * qk_scale).to(dtype)  # log2 units
    # the mask's row: prefix keys[, then the action tokens], read at the strides given (a view
    # of a wider or broadcast buffer needs no copy; rows padded to 16 bytes timed the same on
    # the H200: attention_probe.py's expert_attention_mask_stride)
    mask_row = mask_ptr + b * stride_m_b + t[:, None] * stride_m_t
    m_i = tl.full((BM,), float('-inf'), dtype=tl.float32)
    l_i = tl.zeros((BM,), dtype=tl.float32)
    acc1 = tl.zeros((BM, HALF), dtype=tl.float32)
    acc2 = tl.zeros((BM, HALF), dtype=tl.float32)
    if split < prefix_splits:  # a slice of the prefix K/V (already rotated)[, then own]
        start = split * keys_per_split
        stop = tl.minimum(start + keys_per_split, T + n if OWN == 2 else T)
        for k0 in range(start, stop, BN):
            keys = k0 + tl.arange(0, BN)
            key_ok = keys < stop
            if OWN == 2:  # keys T.. are the tokens' own, rotated by the qkv GEMM
                own = keys >= T
                at = tl.where(own, 0, keys)
                mine = q_ptr + b * stride_q_b + tl.where(own, keys - T, 0)[:, None] * stride_q_t \
                    + heads * 2 * HALF + d[None, :]
                k_at = tl.where(own[:, None], mine,
                                kp_ptr + b * stride_kp_b + at[:, None] * stride_kp_t + d[None, :])
                v_at = tl.where(own[:, None], mine + 2 * HALF,
                                vp_ptr + b * stride_vp_b + at[:, None] * stride_vp_t + d[None, :])
            else:
                k_at = kp_ptr + b * stride_kp_b + keys[:, None] * stride_kp_t + d[None, :]
                v_at = vp_ptr + b * stride_vp_b + keys[:, None] * stride_vp_t + d[None, :]
            # (.to: prefix K/V stored narrower than q, e.g. FP8 in attention_probe.py's
            # 'expert_attention_keys', widen in registers; a no-op at q's own dtype)
            k1 = tl.load(k_at, mask=key_ok[:, None], other=0.0).to(dtype)
            k2 = tl.load(k_at + HALF, mask=key_ok[:, None], other=0.0).to(dtype)
            v1 = tl.load(v_at, mask=key_ok[:, None], other=0.0).to(dtype)
            v2 = tl.load(v_at + HALF, mask=key_ok[:, None], other=0.0).to(dtype)
            keep = tl.load(mask_row + keys[None, :], mask=r_ok[:, None] & key_ok[None, :],
                           other=0)
            m_i, l_i, acc1, acc2 = _attend_block(q1, q2, k1, k2, v1, v2, keep, key_ok, m_i,
                                                 l_i, acc1, acc2, PRECISION)
    elif OWN == 1:  # the action tokens' own K/V, from the qkv GEMM; K rotated here
        for k0 in range(0, n, BN):
            j = k0 + tl.arange(0, BN)
            key_ok = j < n
            jj = tl.where(key_ok, j, 0)
            k_at = q_ptr + b * stride_q_b + jj[:, None] * stride_q_t + heads * 2 * HALF \
                + d[None, :]
            k1 = tl.load(k_at, mask=key_ok[:, None], other=0.0).to(tl.float32)
            k2 = tl.load(k_at + HALF, mask=key_ok[:, None], other=0.0).to(tl.float32)
            kcs = (b * n + jj)[:, None] * HALF + d[None, :]
            kc = tl.load(cos_ptr + kcs)
            ksn = tl.load(sin_ptr + kcs)
            k1, k2 = (k1 * kc - k2 * ksn).to(dtype), (k2 * kc + k1 * ksn).to(dtype)
            v1 = tl.load(k_at + 2 * HALF, mask=key_ok[:, None], other=0.0)
            v2 = tl.load(k_at + 3 * HALF, mask=key_ok[:, None], other=0.0)
            keep = tl.load(mask_row + T + j[None, :], mask=r_ok[:, None] & key_ok[None, :],
                           other=0)
            m_i, l_i, acc1, acc2 = _attend_block(q1, q2, k1, k2, v1, v2, keep, key_ok, m_i,
                                                 l_i, acc1, acc2, PRECISION)
    _grid_dependency(PDL, 2)
    if splits > 1:  # this slice's (max, sum, output); _mqa_combine_kernel merges the slices
        part = (b * splits + split) * rows_total + r
        tl.store(m_ptr + part, m_i, mask=r_ok)
        tl.store(l_ptr + part, l_i, mask=r_ok)
        acc_at = acc_ptr + part[:, None] * 2 * HALF + d[None, :]
        tl.store(acc_at, acc1, mask=r_ok[:, None])
        tl.store(acc_at + HALF, acc2, mask=r_ok[:, None])
    else:
        l_i = tl.where(r_ok, l_i, 1.0)  # rows past the end: no keys were summed
        # row r = token * heads + head sits at out[b, token, head * D:]: (b, n * heads, D)
        out_at = out_ptr + (b * rows_total + r)[:, None] * 2 * HALF + d[None, :]
        tl.store(out_at, (acc1 / l_i[:, None]).to(dtype), mask=r_ok[:, None])
        tl.store(out_at + HALF, (acc2 / l_i[:, None]).to(dtype), mask=r_ok[:, None])


@triton.jit
def _mqa_combine_kernel(m_ptr, l_ptr, acc_ptr, out_ptr, rows_total, splits,
                        SPLITS: tl.constexpr, D: tl.constexpr, PDL: tl.constexpr = 0):
    """Merge the key slices of one query row (flash-decoding): one program per row, so the
    merge is parallel (the last slice merging its row block in `_mqa_kernel` instead ran 9 us
    longer on the H200: a serial chain of loads)."""
    _grid_dependency(PDL, 1)
    pid = tl.program_id(0)
    b = pid // rows_total
    r = pid % rows_total
    s = tl.arange(0, SPLITS)
    s_ok = s < splits
    part = (b * splits + s) * rows_total + r
    m = tl.load(m_ptr + part, mask=s_ok, other=float('-inf'))
    l_ = tl.load(l_ptr + part, mask=s_ok, other=0.0)
    w = tl.where(s_ok, tl.exp2(m - tl.max(m, axis=0)), 0.0)
    d = tl.arange(0, D)
    acc = tl.load(acc_ptr + part[:, None] * D + d[None, :], mask=s_ok[:, None], other=0.0)
    out = tl.sum(acc * w[:, None], axis=0) / tl.sum(w * l_, axis=0)
    # row r = token * heads + head sits at out[b, token, head * D:]: (b, n * heads, D) in memory
    tl.store(out_ptr + pid * D + d, out.to(out_ptr.dtype.element_ty))


def _attend(q, stride_q, k, v, mask, heads, scale, n, T, d, block_m, block_n, keys_per_split,
            warps, stages, own, cos=None, sin=None, pdl=0):
    """Launch `_mqa_kernel` -> (b, n, heads * d); q rows are token-major, k/v (b, T, d)."""
    b = q.shape[0]
    kp, vp = k.reshape(b, T, d), v.reshape(b, T, d)
    kp = kp if kp.stride(2) == 1 else kp.contiguous()
    vp = vp if vp.stride(2) == 1 else vp.contiguous()
    keep = (mask if mask.stride(-1) == 1 else mask.contiguous()).view(torch.uint8)
    rows = n * heads
    row_blocks = triton.cdiv(rows, block_m)
    prefix_splits = triton.cdiv(T + n if own == 2 else T, keys_per_split)
    splits = prefix_splits + (1 if own == 1 else 0)
    out = torch.empty((b, n, heads * d), dtype=q.dtype, device=q.device)
    m = l_ = acc = out
    if splits > 1:
        f32 = dict(dtype=torch.float32, device=q.device)
        m = torch.empty((b, splits, rows), **f32)
        l_ = torch.empty((b, splits, rows), **f32)
        acc = torch.empty((b, splits, rows, d), **f32)
    if own == 1:
        cos, sin = cos.float().contiguous(), sin.float().contiguous()
    else:
        cos = sin = out
    _mqa_kernel[(b * row_blocks, splits)](
        q, kp, vp, cos, sin, keep, m, l_, acc, out, n, T, heads, stride_q[0],
        stride_q[1], kp.stride(0), kp.stride(1), vp.stride(0), vp.stride(1), keep.stride(0),
        keep.stride(1), row_blocks,
        prefix_splits, keys_per_split, scale * LOG2E, OWN=own, HALF=d // 2, BM=block_m,
        BN=block_n, PRECISION=_precision(q.dtype), PDL=pdl, num_warps=warps, num_stages=stages,
        **_pdl_launch(pdl))
    if splits > 1:
        _mqa_combine_kernel[(b * rows,)](m, l_, acc, out, rows, splits,
                                         SPLITS=triton.next_power_of_2(splits), D=d,
                                         PDL=min(pdl, 1),
                                         num_warps=4, **_pdl_launch(pdl))
    return out


def mqa_attention(qkv, k_prefix, v_prefix, cos, sin, mask, heads, scale, tiles):
    """Attention of the action tokens: every query head of qkv (b, n, (heads + 2) * d) against
    the prefix K/V (b, T, d) and the tokens' own K/V -> (b, n, heads * d).

    One program per (block of query rows, slice of keys) keeps the GPU busy at 50 queries; a
    second kernel merges the slices' (max, sum, output) as flash-decoding does. tiles =
    (block_m, block_n, keys_per_split, warps, stages[, pdl]): pdl as in expert_gemm."""
    return _attend_expert('mqa_attention', 1, qkv, k_prefix, v_prefix, mask, heads, scale,
                          tiles, cos, sin)


def mqa_attention_rotated(qkv, k_prefix, v_prefix, mask, heads, scale, tiles):
    """mqa_attention after a qkv GEMM that rotated q and k itself (triton_premade's rope
    epilogue): nothing is rotated here, and the action tokens' own keys follow the prefix's in
    one index space, so the T + n keys split evenly and no split holds only the 50 own keys
    (which every row block rotated again, in registers that spilled). tiles as mqa_attention's."""
    return _attend_expert('mqa_attention_rotated', 2, qkv, k_prefix, v_prefix, mask, heads,
                          scale, tiles)


def _attend_expert(name, own, qkv, k_prefix, v_prefix, mask, heads, scale, tiles, cos=None,
                   sin=None):
    """The expert's attention in `_mqa_kernel` mode `own` (1 or 2), qkv checked first."""
    block_m, block_n, keys_per_split, warps, stages = tiles[:5]
    pdl = tiles[5] if len(tiles) > 5 else 0
    b, n, width = qkv.shape
    T, d = k_prefix.shape[1], k_prefix.shape[-1]
    if width != (heads + 2) * d or qkv.stride(2) != 1:
        raise ValueError(f'{name}: qkv {tuple(qkv.shape)} is not q/k/v of {heads} heads '
                         f'of {d}')
    return _attend(qkv, qkv.stride()[:2], k_prefix, v_prefix, mask, heads, scale, n, T, d,
                   block_m, block_n, keys_per_split, warps, stages, own, cos, sin, pdl)


def mqa_flash(q, k, v, mask, heads, scale, tiles):
    """Flash attention of rotated q (b, n, heads, d) against one K/V head (b, T, [1,] d) under a
    boolean mask (b, n, T) with the eager code's finite fill -> (b, n, heads * d): the prefix's
    attention in one kernel (no score matrix in memory). tiles = (block_m, block_n, warps,
    stages); each program sweeps every key, so no merge is needed."""
    block_m, block_n, warps, stages = tiles
    b, n, h, d = q.shape
    if h != heads or q.stride(3) != 1 or q.stride(2) != d:
        raise ValueError(f'mqa_flash: q {tuple(q.shape)} is not {heads} packed heads')
    T = k.shape[1]
    return _attend(q, q.stride()[:2], k, v, mask, heads, scale, n, T, d, block_m, block_n,
                   T, warps, stages, 0)
