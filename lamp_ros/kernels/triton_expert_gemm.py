"""Triton kernel of the action expert's layer: its four GEMMs, each with what surrounds it fused.

The expert runs its 18 layers 10 times per inference on 50 rows. At that size each GEMM is a
stream of its weights (M = 50 is far below the GPU's compute knee), so what costs is every extra
launch and every extra round trip of the activations. One layer is five launches: four of this
module's kernel and the attention between (triton_attention.py):

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

from lamp_ros.kernels.triton_kernels import dot_precision as _precision
from lamp_ros.kernels.triton_kernels import gelu_tanh as _gelu_tanh
from lamp_ros.kernels.triton_kernels import grid_dependency as _grid_dependency
from lamp_ros.kernels.triton_kernels import pdl_launch as _pdl_launch
from lamp_ros.kernels.triton_kernels import rows as _rows


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

    tiles = (block_m, block_n, block_k, warps, stages, splits, swap): block_m rows of x by block_n
    rows of the weight per program. With splits > 1, K is cut into that many slices, one program
    each, and `counters` (int32 zeros, one per output tile; left zero again by the kernel) tells
    the last slice of a tile to finish. swap = 1 computes the block transposed (W_block @
    x_block^T, the weight as the MMA's M side): at 50 rows a 64-128-row weight block then costs
    fewer re-reads of x per weight byte than 16-32 columns of W with x as M. (It helped the
    norm-fused parts but lost every part to cuBLAS or the unswapped tilings: the tuner decides;
    docs/notebook/.) An optional eighth value turns on programmatic dependent launch
    (triton_kernels.grid_dependency: 1 or 2; 0 or absent: off), and an optional ninth, 1, loads x
    and the (first) weight by tensor descriptor (TMA: the copy engine moves each (block, block_k)
    box, zero-filling rows past the end) instead of pointer loads: the same numbers bit for bit,
    and a little faster for o and down together in one Euler step (docs/notebook/, 'tmagemm';
    Hopper and later).

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
