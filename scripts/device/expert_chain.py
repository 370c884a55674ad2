"""One Euler step of pi05_full's expert (18 layers, five parts each) as the artifact runs it, on
the GPU: per-layer GPU time of the part forms, and the attention kernels
checked in bf16. Isolated part timings (kernels_check.py, the build's tuning) miss what happens
between kernels; this chain has distinct weights per layer (no L2 reuse across layers), as the
inference does.

    python3 scripts/device/expert_chain.py [--gemms] [--out FILE.json]
    python3 scripts/device/expert_chain.py --once     (3 plain steps, no graph: for ncu)
    python3 scripts/device/expert_chain.py --forms chosen --no-attention

Forms: 'fused' (every part on a lamp kernel), 'swapped' (the same with swapped GEMM tiles) and
'chosen' (qkv and gate_up in their library form: rms_norm + cuBLAS [+ geglu], o and down fused,
as the H200 build picked until the premade form); the word 'premade' runs qkv and gate_up in
that form (triton_premade: o and down make the normed input, no norm or GeGLU kernel), which
the H200 build picks since (44.8 -> 39.9 / 40.1 us a layer, bench/results/h200_premade/);
'chosen pdl1' and 'chosen pdl2' are 'chosen' with every lamp kernel launched as a
programmatic dependent launch (triton_kernels.grid_dependency), letting the next
kernel launch at once (1) or after the main loop (2); their step must equal 'chosen' bit for
bit. 'chosen pdl2 wgmma16' (or wgmma8) runs the attention on attention_wgmma_probe.py's kernel
(K/V packed once a layer) in the same step, to see it between the GEMMs it sits among in the
artifact. The attention section also times tilings outside the build's candidates
(EXTRA_ATTENTION), and the report lists each compiled lamp kernel's registers, spills and shared
memory.

Measured on the H200 (2026-11-30, bench/results/expert_chain_h200.json, before the swapped
form existed): chosen 48.2 us per layer, fused 69.3; the isolated part timings sum to 41.7, so
about 6 us per layer go between kernels. Tried and dropped with this script (then with the
attention variant below, chosen 53.3 us per layer): programmatic dependent launch on the lamp
kernels with the GEMMs fetching their weights into L2 before waiting (55.9 us, slower; fused
74.6 -> 81.2), and the attention's key slices merged by the last slice of each row block instead
of a second kernel (22 us per attention instead of 13: a serial chain of loads in one
program). With the swapped form (bench/results/expert_chain_swapped_h200.json): swapped 56.7 us
per layer (fused 70.7, chosen 49.2); alone, the swapped tilings sped up the norm-fused qkv
(10.4 -> 9.0 us) and gate_up (15.0 -> 12.0) but lost every part to the build's choices.
The cuBLAS parts' weights asked into L2 beside each attention (form word 'prefetch', and
'prefetchall' with o and down too; bench/results/h200_l2_prefetch/, two runs, 2026-12-01):
chosen pdl2 45.31 / 44.97 us per layer, prefetch 45.63 / 45.12, prefetchall 46.46 / 45.87,
and the bound, every layer's cuBLAS parts on hot weights ('warm'), 44.51 / 43.99: at most 1 us
a layer to win, and the prefetch wins none of it."""

import argparse
import json
import os
import re
import sys

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from bench.probes import graph_replay_ms, save_report
from lamp_ros.kernels import ops, triton_expert as te, triton_kernels as tk, tuning
from lamp_ros.kernels import triton_premade as tp

ROWS, WIDTH, HEADS, D, MLP, PREFIX, LAYERS = 50, 1024, 8, 256, 4096, 968, 18
# [block_m, block_n, block_k, warps, stages, splits, swap]: the best fused tilings the H200 build
# measured, and the swapped form (the weight block as the MMA's M side) split to fill the GPU
GEMM = {'fused': {'qkv': [64, 16, 128, 4, 4, 1, 0], 'o': [64, 32, 128, 4, 4, 4, 0],
                  'gate_up': [64, 32, 128, 4, 4, 1, 0], 'down': [64, 32, 128, 4, 4, 4, 0]},
        'swapped': {'qkv': [64, 64, 128, 4, 4, 2, 1], 'o': [64, 64, 128, 4, 4, 8, 1],
                    'gate_up': [64, 64, 128, 4, 4, 2, 1], 'down': [64, 64, 128, 4, 4, 8, 1]}}
# the build's attention choice (16, 64, 128, 4, 1 until 2026-12-02; ATTENTION=old runs that)
ATTENTION = [16, 64, 128, 4, 1] if os.environ.get('ATTENTION') == 'old' else [16, 64, 256, 4, 2]
# attention tilings the build does not try: software pipelining of 128-key splits, 2 and 8
# warps, 32-key blocks (block_m, block_n, keys_per_split, warps, stages)
EXTRA_ATTENTION = [[16, 64, 128, 4, 2], [16, 32, 128, 4, 2],
                   [16, 64, 128, 2, 1], [16, 64, 128, 8, 1], [16, 32, 64, 4, 1]]


def layer_weights(dev):
    def w(n, k):
        return (torch.randn(n, k, device=dev) / k ** 0.5).to(torch.bfloat16)
    bf = dict(dtype=torch.bfloat16, device=dev)
    return dict(qkv=w((HEADS + 2) * D, WIDTH), o=w(WIDTH, HEADS * D), gate=w(MLP, WIDTH),
                up=w(MLP, WIDTH), gate_up=None, down=w(WIDTH, MLP),
                mod=1 + torch.randn(WIDTH, device=dev) / 10,
                shift=torch.randn(WIDTH, **bf) / 10, scale=torch.randn(WIDTH, **bf) / 10,
                gate_o=(torch.randn(WIDTH, device=dev) / 10).to(torch.bfloat16),
                b_qkv=torch.randn((HEADS + 2) * D, device=dev) / 10,
                b_gate=torch.randn(MLP, device=dev) / 10, b_up=torch.randn(MLP, device=dev) / 10,
                kp=torch.randn(1, PREFIX, 1, D, **bf), vp=torch.randn(1, PREFIX, 1, D, **bf))


def gemm_part(part, L, inp, x, tiles, counters, pdl=0):
    """One GEMM part of layer L: the fused lamp kernel with `tiles`, or its library form
    (tiles == [], as in ExpertKernels). inp is the part's input, x the residual stream; pdl
    applies to the lamp kernels (cuBLAS launches plainly)."""
    if part in ('qkv', 'gate_up'):
        if not tiles:  # rms_norm, cuBLAS [, geglu]
            y = F.linear(tk.rms_norm(inp, L['scale'], L['shift'], 1e-6, pdl=pdl), L[part])
            return y if part == 'qkv' else tk.geglu(*y.chunk(2, -1), pdl=pdl)
        if part == 'qkv':
            return te.expert_gemm(inp, L['qkv'], [*tiles, pdl], counters=counters,
                                  mod=L['mod'], bias=L['b_qkv'], eps=1e-6)
        return te.expert_gemm(inp, L['gate'], [*tiles, pdl], counters=counters,
                              weight2=L['up'], mod=L['mod'], bias=L['b_gate'], bias2=L['b_up'],
                              eps=1e-6)
    if not tiles:  # cuBLAS, addcmul
        return torch.addcmul(x, F.linear(inp, L[part]), L['gate_o'])
    return te.expert_gemm(inp, L[part], [*tiles, pdl], counters=counters, residual=x,
                          gate=L['gate_o'])


WGMMA = {}  # cluster size -> attention_wgmma_probe.WgmmaAttention, made on first use


def wgmma_probe():
    """scripts/device/attention_wgmma_probe.py as a module."""
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    import attention_wgmma_probe
    return attention_wgmma_probe


def wgmma_attention(cluster: int):
    """The wgmma attention probe's kernel in clusters of `cluster` (its layers' K/V packed
    once, in L['packed'], as the Euler steps would share them)."""
    if cluster not in WGMMA:
        probe = wgmma_probe()
        WGMMA[cluster] = probe.WgmmaAttention(probe.Form(cluster))
    return WGMMA[cluster]


@triton.jit
def _l2_prefetch_kernel(table_ptr, CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    """Program (r, b) asks the copy engine to bring BLOCK chunks of region r of the table
    (rows of (address, bytes)) from HBM into L2: one cp.async.bulk.prefetch.L2 per lane, which
    moves no data into the SM and returns at once. Lanes past the region's end repeat its
    first 16 bytes (harmless) rather than branch."""
    region = tl.program_id(0)
    base = tl.load(table_ptr + 2 * region)
    nbytes = tl.load(table_ptr + 2 * region + 1)
    off = (tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)).to(tl.int64) * CHUNK
    inside = off < nbytes
    addr = tl.where(inside, base + off, base)
    size = tl.where(inside, tl.minimum(nbytes - off, CHUNK), 16).to(tl.int32)
    tl.inline_asm_elementwise(
        "{ cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }", "=r,l,r",
        [addr, size], dtype=tl.int32, is_pure=False, pack=1)


L2_PREFETCH_CHUNK, L2_PREFETCH_BLOCK = 16384, 128


def l2_prefetch_table(tensors) -> torch.Tensor:
    """The (address, bytes) rows l2_prefetch reads, built once (a table made during a CUDA
    graph capture would be a host copy in the graph). Each tensor must be contiguous; its bytes
    are rounded down to a multiple of 16, as the copy engine asks."""
    rows_ = []
    for t in tensors:
        if not t.is_contiguous():
            raise ValueError('l2_prefetch: a tensor to prefetch must be contiguous')
        rows_.append([t.data_ptr(), (t.numel() * t.element_size()) // 16 * 16])
    return torch.tensor(rows_, dtype=torch.int64, device=tensors[0].device)


def l2_prefetch(table: torch.Tensor, max_bytes: int) -> None:
    """Start bringing the table's regions (max_bytes the largest) into L2 and return: for
    weights the next kernels read, issued where HBM would otherwise idle (e.g. beside the
    attention, on a stream of its own)."""
    per_program = L2_PREFETCH_CHUNK * L2_PREFETCH_BLOCK
    _l2_prefetch_kernel[(table.shape[0], triton.cdiv(max_bytes, per_program))](
        table, CHUNK=L2_PREFETCH_CHUNK, BLOCK=L2_PREFETCH_BLOCK, num_warps=4)


PREFETCH_STREAM = []  # the side stream of the 'prefetch' forms, made on first use


def prefetch_tables(layers, which: str) -> None:
    """L['prefetch_<which>'] = (table, largest bytes): what layer L's attention asks into L2.
    'prefetch': its gate_up weight and the next layer's qkv weight (the two cuBLAS parts, which
    ran 1.0-2.3 us slower with their weights cold); 'prefetchall': also its o and down."""
    for i, L in enumerate(layers):
        ts = [L['gate_up']] + ([L['o'], L['down']] if which == 'prefetchall' else [])
        if i + 1 < len(layers):
            ts.append(layers[i + 1]['qkv'])
        L[f'prefetch_{which}'] = (l2_prefetch_table(ts),
                                  max(t.numel() * t.element_size() for t in ts))


def step(layers, x, rotation, mask, counters, form: str):
    """One Euler step in `form`: 'BASE[ pdlN][ wgmmaCL][ prefetch|prefetchall][ warm]'.
    wgmmaCL: the attention on the wgmma probe's kernel in clusters of CL, launched plainly,
    instead of the Triton pair. prefetch: as each layer's attention starts, a side stream asks
    the weights of prefetch_tables into L2, joined at the step's end. warm: the cuBLAS parts of
    every layer on layer 0's weights, hot in L2, the bound of what prefetching them can give
    (time only)."""
    base, *words = form.split()
    pdl = next((int(w[3:]) for w in words if w.startswith('pdl')), 0)
    cluster = next((int(w[5:]) for w in words if w.startswith('wgmma')), 0)
    prefetch = next((w for w in words if w.startswith('prefetch')), '')
    tiles = {**GEMM['fused'], 'qkv': [], 'gate_up': []} if base == 'chosen' else GEMM[base]
    main = torch.cuda.current_stream()
    if prefetch and not PREFETCH_STREAM:
        PREFETCH_STREAM.append(torch.cuda.Stream())
    if 'premade' in words:
        rope = next(([int(v) for v in w[5:].split('.')] if '=' in w else ROPE_ATTENTION
                     for w in words if w.startswith('rope')), None)
        return premade_step(layers, x, rotation, mask, counters, tiles, pdl,
                            'tmagemm' in words, rope)
    warm = 'warm' in words  # every layer's cuBLAS parts on layer 0's weights: L2-hot bound
    for L in layers:
        Lc = {**L, 'qkv': layers[0]['qkv'], 'gate_up': layers[0]['gate_up']} if warm else L
        qkv = gemm_part('qkv', Lc, x, x, tiles['qkv'], counters, pdl)
        if prefetch:
            side = PREFETCH_STREAM[0]
            side.wait_stream(main)
            with torch.cuda.stream(side):
                l2_prefetch(*L[f'prefetch_{prefetch}'])
        if cluster:
            a = wgmma_attention(cluster)(qkv, L['packed'], *rotation, mask, HEADS, D ** -0.5)
        else:
            a = te.mqa_attention(qkv, L['kp'], L['vp'], *rotation, mask, HEADS, D ** -0.5,
                                 [*ATTENTION, pdl])
        x = gemm_part('o', L, a, x, tiles['o'], counters, pdl)
        h = gemm_part('gate_up', Lc, x, x, tiles['gate_up'], counters, pdl)
        x = gemm_part('down', L, h, x, tiles['down'], counters, pdl)
    if prefetch:
        main.wait_stream(PREFETCH_STREAM[0])
    return x


# premade_gemm's tiles (block_w, block_k, warps, stages, swap): tma_gemm_probe.py's best
PREMADE = {'qkv': [32, 128, 4, 6, 0], 'gate_up': [32, 128, 4, 4, 0]}
# the rotated attention's tiling in the 'rope' form (attention_probe.py's anatomy: the best of
# 13 at 832 prefix keys + 50 own); 'rope=16.64.256.4.2' names another
ROPE_ATTENTION = [16, 64, 128, 4, 2]
Q_SCALE = D ** -0.5 * te.LOG2E  # q leaves the rope epilogue in log2 units


def premade_step(layers, x, rotation, mask, counters, tiles, pdl, tma_gemm=False, rope=None):
    """The step with qkv and gate_up on triton_premade.premade_gemm: o and the previous
    layer's down make x * mod and the sums of squares in their epilogue (norm_pieces for the
    first layer), so no rms_norm and no GeGLU kernel runs. tma_gemm: o and down take x and W
    by tensor descriptor (expert_gemm's ninth tiles value). (The attention taking the prefix
    K/V so, commit a2c3a10, lost: 42.3 / 42.1 us a layer against 40.3 / 40.3.) rope: the
    attention's tiles when qkv rotates q and k in its epilogue (and scales q) and the
    attention reads them so (te.mqa_attention_rotated), else None."""
    o_tiles, down_tiles = ([*tiles[part], pdl, int(tma_gemm)] for part in ('o', 'down'))
    xm, pieces = tp.norm_pieces(x, layers[0]['mod'], WIDTH // tiles['down'][1], pdl=pdl)
    for i, L in enumerate(layers):
        if rope is None:
            qkv = tp.premade_gemm(xm, pieces, L['qkv'], L['b_qkv'], 1e-6,
                                  [*PREMADE['qkv'], pdl])
            a = te.mqa_attention(qkv, L['kp'], L['vp'], *rotation, mask, HEADS, D ** -0.5,
                                 [*ATTENTION, pdl])
        else:
            qkv = tp.premade_gemm(xm, pieces, L['qkv'], L['b_qkv'], 1e-6,
                                  [*PREMADE['qkv'], pdl], rope=(*rotation, HEADS, Q_SCALE))
            a = te.mqa_attention_rotated(qkv, L['kp'], L['vp'], mask, HEADS, 1 / te.LOG2E,
                                         [*rope, pdl])
        x, xm, pieces = te.expert_gemm(a, L['o'], o_tiles, counters=counters,
                                       residual=x, gate=L['gate_o'], mod_next=L['mod'])
        h = tp.premade_gemm(xm, pieces, L['gate'], L['b_gate'], 1e-6,
                            [*PREMADE['gate_up'], pdl], weight2=L['up'], bias2=L['b_up'])
        if i + 1 < len(layers):
            x, xm, pieces = te.expert_gemm(h, L['down'], down_tiles,
                                           counters=counters, residual=x, gate=L['gate_o'],
                                           mod_next=layers[i + 1]['mod'])
        else:
            x = te.expert_gemm(h, L['down'], down_tiles, counters=counters,
                               residual=x, gate=L['gate_o'])
    return x


def check_premade(L, x, counters) -> dict:
    """premade_gemm against the normed GEMMs' float32 references (max error / max |ref|),
    and the gated GEMM's x * mod and pieces against torch on its own output."""
    xm, pieces = tp.norm_pieces(x, L['mod'], 32)
    out = {'norm_pieces xm exact': bool(torch.equal(
        xm, (x.float() * L['mod']).to(x.dtype))),
        'norm_pieces sums rel error': float(
            ((pieces.sum(0) - x.float().pow(2).sum(-1).flatten()).abs().max()
             / x.float().pow(2).sum(-1).max()))}
    for part, got, want in (
            ('qkv', lambda: tp.premade_gemm(xm, pieces, L['qkv'], L['b_qkv'], 1e-6,
                                            PREMADE['qkv']),
             lambda: ops.ada_linear_reference(x, L['qkv'], L['mod'], L['b_qkv'], 1e-6)),
            ('gate_up', lambda: tp.premade_gemm(xm, pieces, L['gate'], L['b_gate'], 1e-6,
                                                PREMADE['gate_up'], weight2=L['up'],
                                                bias2=L['b_up']),
             lambda: ops.ada_geglu_reference(x, L['gate'], L['up'], L['mod'], L['b_gate'],
                                             L['b_up'], 1e-6))):
        g, w = got().float(), want().float()
        out[f'{part} rel error'] = float((g - w).abs().max() / w.abs().max())
    a = torch.randn(1, ROWS, HEADS * D, dtype=x.dtype, device=x.device)
    y, ym, pieces = te.expert_gemm(a, L['o'], GEMM['fused']['o'], counters=counters,
                                   residual=x, gate=L['gate_o'], mod_next=L['mod'])
    plain = te.expert_gemm(a, L['o'], GEMM['fused']['o'], counters=counters, residual=x,
                           gate=L['gate_o'])
    out['gated prep: y bit-identical to plain'] = bool(torch.equal(y, plain))
    by_tma = te.expert_gemm(a, L['o'], [*GEMM['fused']['o'], 0, 1], counters=counters,
                            residual=x, gate=L['gate_o'])
    out['gated by descriptor: bit-identical to pointer loads'] = bool(torch.equal(by_tma, plain))
    out['gated prep: xm exact'] = bool(torch.equal(ym, (y.float() * L['mod']).to(y.dtype)))
    sq = y.float().pow(2).sum(-1).flatten()
    out['gated prep: sums rel error'] = float((pieces.sum(0) - sq).abs().max() / sq.max())
    return out


def kernel_resources() -> dict:
    """Registers, spills and shared memory of every compiled variant of the lamp kernels."""
    out = {}
    for fn in (te._expert_gemm_kernel, te._mqa_kernel, te._mqa_combine_kernel,
               tk._norm_kernel, tk._geglu_kernel, tp._premade_kernel):
        name = fn.fn.__name__
        try:
            for cache in fn.device_caches.values():
                for kernel in cache[0].values():
                    kernel._init_handles()  # Triton 3.6 sets n_regs when it loads the cubin
                    c = {k: kernel.metadata._asdict().get(k) for k in ('num_warps',
                                                                       'num_stages', 'shared')}
                    out.setdefault(name, []).append({'regs': kernel.n_regs,
                                                     'spills': kernel.n_spills, **c})
        except Exception as exc:  # the cache layout is Triton's internal business
            out[name] = f'unavailable: {type(exc).__name__}: {exc}'
    return out


def time_graph(fn, runs=50):
    times, out = graph_replay_ms(fn, runs, warmups=3)
    return float(torch.tensor(times).median()), out.clone()


def check_attention(dev) -> dict:
    """The new kernels in bf16 against their float32 reference (max error / max |ref|)."""
    bf = dict(dtype=torch.bfloat16, device=dev)
    qkv = torch.randn(1, ROWS, (HEADS + 2) * D, **bf)
    kp, vp = torch.randn(2, 1, PREFIX, 1, D, **bf)
    angle = torch.randn(1, ROWS, D // 2, device=dev)
    mask = torch.rand(1, ROWS, PREFIX + ROWS, device=dev) > 0.1
    mask[0, 3] = False
    out = {}
    want = ops.mqa_attention_reference(qkv, kp, vp, angle.cos(), angle.sin(), mask, HEADS,
                                       D ** -0.5).float()
    for tiles in tuning.attention_candidates(D) + EXTRA_ATTENTION:
        got = te.mqa_attention(qkv, kp, vp, angle.cos(), angle.sin(), mask, HEADS, D ** -0.5,
                               tiles).float()
        out[f'expert attention {tiles}'] = {
            'rel_error': float((got - want).abs().max() / want.abs().max()),
            'us': 1e3 * tuning.gpu_time_ms(lambda: te.mqa_attention(
                qkv, kp, vp, angle.cos(), angle.sin(), mask, HEADS, D ** -0.5, tiles))}
    q = torch.randn(1, PREFIX, HEADS, D, **bf)
    pmask = torch.rand(1, PREFIX, PREFIX, device=dev) > 0.1
    pmask[0, -5:] = False  # padding rows
    want = ops.mqa_flash_reference(q, kp, vp, pmask, HEADS, D ** -0.5).float()

    def library():
        s = torch.matmul(q.reshape(1, PREFIX * HEADS, D), kp.reshape(1, PREFIX, D).mT)
        p = tk.masked_softmax(s, pmask, HEADS, D ** -0.5)
        return torch.matmul(p, vp.reshape(1, PREFIX, D))
    out['prefix attention library'] = {'us': 1e3 * tuning.gpu_time_ms(library)}
    for tiles in tuning.flash_candidates():
        try:
            got = te.mqa_flash(q, kp, vp, pmask, HEADS, D ** -0.5, tiles).float()
            out[f'prefix flash {tiles}'] = {
                'rel_error': float((got - want).abs().max() / want.abs().max()),
                'finite': bool(got.isfinite().all()),
                'us': 1e3 * tuning.gpu_time_ms(
                    lambda: te.mqa_flash(q, kp, vp, pmask, HEADS, D ** -0.5, tiles))}
        except Exception as exc:  # a tiling the GPU rejects (shared memory)
            out[f'prefix flash {tiles}'] = {'rejected': str(exc)[-200:]}
    return out


def check_rope(L, x, rotation, mask) -> dict:
    """The qkv GEMM with its rope epilogue and the rotated attention, each alone on 18 layers'
    weights (us a layer) beside today's pair, and their bf16 error against the float32
    references (max error / max |ref|)."""
    xm, pieces = tp.norm_pieces(x, L[0]['mod'], 32)
    out = {}
    for tiles in ([32, 128, 4, 6, 0], [32, 128, 4, 4, 0], [32, 128, 4, 8, 0],
                  [64, 128, 4, 6, 1], [64, 128, 4, 4, 1], [16, 128, 4, 8, 0]):
        for rope in (None, (*rotation, HEADS, Q_SCALE)):
            name = f'qkv {tiles}' + (' rope' if rope else '')
            try:
                def run(tiles=tiles, rope=rope):
                    return [tp.premade_gemm(xm, pieces, each['qkv'], each['b_qkv'], 1e-6,
                                            tiles, rope=rope) for each in L]
                us = 1e3 * tuning.gpu_time_ms(run) / len(L)
                got = run()[0].float()
                want = (ops.premade_linear_rope_reference(
                    xm, pieces, L[0]['qkv'], L[0]['b_qkv'], *rope, 1e-6) if rope else
                    ops.premade_linear_reference(xm, pieces, L[0]['qkv'], L[0]['b_qkv'],
                                                 1e-6)).float()
                out[name] = {'us': round(us, 2), 'rel_error': float(
                    (got - want).abs().max() / want.abs().max())}
            except Exception as exc:  # a tiling the GPU rejects
                out[name] = f'rejected: {type(exc).__name__}: {str(exc)[-200:]}'
            print(name, out[name], flush=True)
    plain = [tp.premade_gemm(xm, pieces, each['qkv'], each['b_qkv'], 1e-6, PREMADE['qkv'])
             for each in L]
    rotated = [tp.premade_gemm(xm, pieces, each['qkv'], each['b_qkv'], 1e-6, PREMADE['qkv'],
                               rope=(*rotation, HEADS, Q_SCALE)) for each in L]
    want = ops.mqa_attention_reference(plain[0], L[0]['kp'], L[0]['vp'], *rotation, mask,
                                       HEADS, D ** -0.5).float()

    def today():
        return [te.mqa_attention(plain[i], each['kp'], each['vp'], *rotation, mask, HEADS,
                                 D ** -0.5, ATTENTION) for i, each in enumerate(L)]
    got = today()[0].float()
    out[f'attention today {ATTENTION}'] = {
        'us': round(1e3 * tuning.gpu_time_ms(today) / len(L), 2),
        'rel_error': float((got - want).abs().max() / want.abs().max())}
    print('attention today', out[f'attention today {ATTENTION}'], flush=True)
    for tiles in ([16, 64, 128, 4, 2], [16, 64, 128, 4, 1], [16, 64, 256, 4, 2],
                  [16, 32, 128, 4, 2], [16, 32, 128, 4, 3], [16, 64, 192, 4, 2],
                  [32, 64, 128, 4, 2], [64, 64, 64, 8, 1]):
        name = f'attention rotated {tiles}'
        try:
            def run(tiles=tiles):
                return [te.mqa_attention_rotated(rotated[i], each['kp'], each['vp'], mask,
                                                 HEADS, 1 / te.LOG2E, tiles)
                        for i, each in enumerate(L)]
            got = run()[0].float()
            out[name] = {'us': round(1e3 * tuning.gpu_time_ms(run) / len(L), 2),
                         'rel_error': float((got - want).abs().max() / want.abs().max())}
        except Exception as exc:  # a tiling the GPU rejects (shared memory)
            out[name] = f'rejected: {type(exc).__name__}: {str(exc)[-200:]}'
        print(name, out[name], flush=True)
    return out


def check_gemms(L, x, counters) -> dict:
    """Each GEMM part of one layer alone: the fused tiling above, the library form, and every
    swapped candidate of tuning.gemm_candidates (us; swapped ones' error against the float32
    reference, max error / max |ref|)."""
    dev = x.device
    a = torch.randn(1, ROWS, HEADS * D, dtype=torch.bfloat16, device=dev)
    h = torch.randn(1, ROWS, MLP, dtype=torch.bfloat16, device=dev)
    parts = {  # part -> (input, float32 reference of the fused form, weight shape)
        'qkv': (x, lambda: ops.ada_linear_reference(x, L['qkv'], L['mod'], L['b_qkv'], 1e-6),
                L['qkv'].shape),
        'o': (a, lambda: ops.gated_linear_reference(a, L['o'], x, L['gate_o']), L['o'].shape),
        'gate_up': (x, lambda: ops.ada_geglu_reference(x, L['gate'], L['up'], L['mod'],
                                                       L['b_gate'], L['b_up'], 1e-6),
                    L['gate'].shape),
        'down': (h, lambda: ops.gated_linear_reference(h, L['down'], x, L['gate_o']),
                 L['down'].shape),
    }
    out = {}
    for part, (inp, reference, (n, k)) in parts.items():
        def run(tiles):
            return gemm_part(part, L, inp, x, tiles, counters)
        row = {'library': 1e3 * tuning.gpu_time_ms(lambda: run([]))}
        tiles = GEMM['fused'][part]
        row[str(tiles)] = 1e3 * tuning.gpu_time_ms(lambda: run(tiles))
        want = reference().float()
        for tiles in (c for c in tuning.gemm_candidates(ROWS, n, k) if c[-1]):
            try:
                err = float((run(tiles).float() - want).abs().max() / want.abs().max())
                row[str(tiles)] = {'us': 1e3 * tuning.gpu_time_ms(lambda: run(tiles)),
                                   'rel_error': err}
            except Exception as exc:  # a tiling the GPU rejects (shared memory)
                row[str(tiles)] = f'rejected: {str(exc)[-150:]}'
        out[part] = row
        print(part, json.dumps(row), flush=True)
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--out', default='')
    parser.add_argument('--gemms', action='store_true',
                        help='also time each GEMM part alone in every swapped tiling')
    parser.add_argument('--forms', default='fused,swapped,chosen,chosen pdl1,chosen pdl2',
                        help='comma-separated forms to time (chosen is always timed)')
    parser.add_argument('--no-attention', action='store_true',
                        help='skip the attention section')
    parser.add_argument('--once', action='store_true',
                        help='run 3 plain chosen steps and stop (for a profiler)')
    args = parser.parse_args()
    torch.manual_seed(0)
    dev = 'cuda'
    layers = [layer_weights(dev) for _ in range(LAYERS)]
    for L in layers:
        L['gate_up'] = torch.cat([L['gate'], L['up']])
    for which in ('prefetch', 'prefetchall'):
        if re.search(rf'\b{which}\b', args.forms):
            prefetch_tables(layers, which)
    if 'wgmma' in args.forms:
        for L in layers:
            L['packed'] = wgmma_probe().pack_prefix(L['kp'], L['vp'])
    x = torch.randn(1, ROWS, WIDTH, dtype=torch.bfloat16, device=dev)
    angle = torch.randn(1, ROWS, D // 2, device=dev)
    rotation = (angle.cos(), angle.sin())
    mask = torch.ones(1, ROWS, PREFIX + ROWS, dtype=torch.bool, device=dev)
    counters = torch.zeros(1024, dtype=torch.int32, device=dev)
    if args.once:
        for _ in range(3):
            step(layers, x, rotation, mask, counters, 'chosen')
        torch.cuda.synchronize()
        return
    report = {'layers': LAYERS, 'gemm_tiles': GEMM, 'attention_tiles': ATTENTION}
    outputs = {}
    # 'chosen' first: the other forms' outputs are compared with it
    forms = ['chosen'] + [f for f in args.forms.split(',') if f and f != 'chosen']
    for form in forms:
        try:
            ms, outputs[form] = time_graph(lambda: step(layers, x, rotation, mask, counters,
                                                        form))
        except Exception as exc:  # e.g. a launch option this Triton or driver lacks
            report[form] = f'failed: {type(exc).__name__}: {str(exc)[-300:]}'
            print(form, report[form], flush=True)
            continue
        report[form] = {'step_ms': ms, 'layer_us': 1e3 * ms / LAYERS,
                        'inference_ms (x10 steps)': 10 * ms}
        if ' pdl' in form or 'prefetch' in form or 'premade' in form:
            report[form]['max_abs_diff_to_chosen'] = float(
                (outputs[form].float() - outputs['chosen'].float()).abs().max())
            report[form]['equal_to_chosen'] = bool(torch.equal(outputs[form],
                                                               outputs['chosen']))
            report[form]['rel_diff_to_chosen'] = float(
                (outputs[form].float() - outputs['chosen'].float()).abs().max()
                / outputs['chosen'].float().abs().max())
        print(f'{form:12s} step {ms:.3f} ms, {1e3 * ms / LAYERS:.1f} us per layer '
              f'{report[form]}', flush=True)
    if 'premade' in args.forms:
        report['premade_check'] = check_premade(layers[0], x, counters)
        print('premade check', report['premade_check'], flush=True)
    if 'rope' in args.forms:
        report['rope_check'] = check_rope(layers, x, rotation, mask)
    report['counters_left'] = int(counters.abs().sum())
    report['kernel_resources'] = kernel_resources()
    save_report(report, args.out)
    if args.gemms:
        report['gemms'] = check_gemms(layers[0], x, counters)
        save_report(report, args.out)
    if args.no_attention:
        return
    report['attention'] = check_attention(dev)
    for k, v in report['attention'].items():
        print(k, v, flush=True)
    save_report(report, args.out)


if __name__ == '__main__':
    main()
