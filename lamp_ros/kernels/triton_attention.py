"""Triton kernels of the multi-query attentions: the action expert's, and the prefix's flash.

Every query head attends to one K/V head, so the heads of a token are rows of one matrix. The
expert's attention (the fifth of its layer's five launches: triton_expert_gemm.py has the other
four) reads the raw or already rotated qkv GEMM output and both K/V sources, the prefix's cache
and the action tokens' own, with RoPE, the mask and the softmax in the same kernel; at 50 query
rows it splits the keys over programs and merges the slices as flash-decoding does. The
prefix's attention (mqa_flash) sweeps every key in one program per row block, so no score
matrix is ever in memory. Scores are in log2 units (LOG2E, kernels/operators/attention.py).
"""

import torch
import triton
import triton.language as tl

from lamp_ros.kernels.operators.attention import LOG2E
from lamp_ros.kernels.triton_kernels import dot_precision as _precision
from lamp_ros.kernels.triton_kernels import grid_dependency as _grid_dependency
from lamp_ros.kernels.triton_kernels import pdl_launch as _pdl_launch

FILL = tl.constexpr(-3.4028234663852886e38)  # the eager code's finite fill for masked logits


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
    keys holds four float32 (keys, d/2) tiles at once, so registers spill. Rotating 16 keys at
    a time removed the spills but made the kernel slower: four serial blocks; docs/notebook/.)"""
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
    # of a wider or broadcast buffer needs no copy; rows padded to 16 bytes timed the same:
    # docs/notebook/)
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
            # (.to: prefix K/V stored narrower than q, e.g. FP8 as tried in the notebook's
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
    merge is parallel (the last slice merging its row block in `_mqa_kernel` instead ran
    longer: a serial chain of loads)."""
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
    (block_m, block_n, keys_per_split, warps, stages[, pdl]): pdl as in
    triton_expert_gemm.expert_gemm."""
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
