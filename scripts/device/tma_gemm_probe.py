"""Can a Triton GEMM stream the expert's weights at 50 rows as fast as cuBLAS? (issue 9)

Today's Triton GEMMs (`triton_expert._expert_gemm_kernel`) load their tiles through pointers
at 3-4 pipeline stages and stream weights at about 1 TB/s at 50 rows, half of cuBLAS's; so the
expert keeps its qkv and gate_up on cuBLAS, with the adaRMS norm and the GeGLU as kernels of
their own around them (two kernels and two boundaries a part that a fused GEMM would not have).
cuBLAS's kernels for these shapes (the kernel table: nvjet ..._64x56_64x14_2x1 for gate_up,
..._32x64_64x16_4x1 for qkv) keep 14-16 stages of 64-wide K tiles in flight, the weight as the
MMA's M side and the 50 tokens as its N side. This probe times a Triton GEMM that does the
same: tensor-descriptor (TMA) loads of the weight tile and the activation tile, the weight as
M (`swap`) or as N, 4 or 8 stages, split along K with the partial sums added by the last split
(as the lamp kernel does), against cuBLAS (`F.linear`) and the lamp kernel at the build's
tilings, for the expert's four GEMM shapes. Every candidate is timed as the build times them:
one CUDA graph calls it once per layer over 18 layers' weights (cold, from HBM), median of
replays, per layer. Plain GEMMs (no epilogue): the question is only the weight stream.

    python3 scripts/device/tma_gemm_probe.py [--parts qkv,gate_up] [--normed qkv,gate_up]
                                             [--out FILE.json]

--normed also times the normed forms of qkv and gate_up: the library form (rms_norm, cuBLAS
[, GeGLU]), the lamp kernel's prologue form, and descriptor-load GEMMs either with that
prologue or on an input the kernel before made (x * mod and the pieces of the rows' sums of
squares: triton_premade.premade_gemm, which began as this probe's kernel; the figures below
were taken with that first copy, in commit 51b0195, before it loaded its epilogue's inputs
ahead of the loop).

Measured on the H200 (2026-12-01, bench/results/tma_gemm_probe.json and
tma_gemm_probe_normed.json), us per layer, plain: qkv 4.88 against cuBLAS 5.30 (the lamp kernel
6.05), gate_up 7.11 against 7.61 (7.67), o 6.09 against 7.42 (6.31), down 7.38 against 8.29
(7.91); normed: qkv 5.89 on a made input, 9.86 with the prologue, 8.35 for the library form;
gate_up 8.93, 12.0 and 12.1.
"""

import argparse
import itertools
import time

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from bench.probes import graph_replay_ms, save_report
from lamp_ros.kernels import triton_expert as te, triton_kernels as tk, triton_premade as tp
from lamp_ros.kernels.triton_kernels import gelu_tanh as _gelu_tanh

ROWS, LAYERS = 50, 18
PARTS = {'qkv': (2560, 1024), 'o': (1024, 2048), 'gate_up': (8192, 1024), 'down': (1024, 4096)}
# the build's tilings of the lamp kernel on the H200 (plain, no epilogue here)
LAMP_TILES = {'qkv': [64, 16, 128, 4, 4, 1, 0], 'o': [64, 32, 128, 4, 4, 4, 0],
              'gate_up': [64, 32, 128, 4, 4, 1, 0], 'down': [64, 32, 128, 4, 4, 4, 0]}
# and of its normed forms (ada_linear, ada_geglu: the norm in the GEMM's prologue)
LAMP_ADA_TILES = {'qkv': [64, 16, 128, 4, 4, 1, 0], 'gate_up': [64, 32, 128, 4, 4, 1, 0]}
SMEM = 220 * 1024


@triton.jit
def _tma_gemm_kernel(w_desc, x_desc, y_ptr, part_ptr, count_ptr, M, N, k_per_split, stride_y,
                     SWAP: tl.constexpr, BW: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
                     SPLITS: tl.constexpr, STAGES: tl.constexpr):
    """Program (i, s): weight rows i*BW.. over K slice s; y[t, n] = sum_k x[t, k] w[n, k].
    Both tiles come by tensor descriptor (one bulk copy each a stage); the token tile's rows
    past M are the copy engine's zero fill."""
    pid = tl.program_id(0)
    split = tl.program_id(1)
    k0 = split * k_per_split
    if SWAP:
        acc = tl.zeros((BW, BT), dtype=tl.float32)
    else:
        acc = tl.zeros((BT, BW), dtype=tl.float32)
    for k in tl.range(k0, k0 + k_per_split, BK, num_stages=STAGES):
        w = w_desc.load([pid * BW, k])
        x = x_desc.load([0, k])
        if SWAP:
            acc = tl.dot(w, tl.trans(x), acc)
        else:
            acc = tl.dot(x, tl.trans(w), acc)
    if SWAP:
        acc = tl.trans(acc)
    toks = tl.arange(0, BT)
    cols = pid * BW + tl.arange(0, BW)
    last = True
    if SPLITS > 1:
        here = (split * tl.num_programs(0) + pid) * BT * BW + toks[:, None] * BW \
            + tl.arange(0, BW)[None, :]
        tl.store(part_ptr + here, acc)
        tl.debug_barrier()
        done = tl.atomic_add(count_ptr + pid, 1, sem='acq_rel')
        last = done == SPLITS - 1
        if last:
            acc = tl.zeros((BT, BW), dtype=tl.float32)
            for s in tl.static_range(SPLITS):
                acc += tl.load(part_ptr + here + (s - split) * tl.num_programs(0) * BT * BW,
                               cache_modifier='.cg')
            tl.atomic_xchg(count_ptr + pid, 0)
    if last:
        ok = (toks[:, None] < M) & (cols[None, :] < N)
        tl.store(y_ptr + toks[:, None] * stride_y + cols[None, :],
                 acc.to(y_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _tma_ada_kernel(w_desc, w2_desc, x_desc, y_ptr, mod_ptr, bias_ptr, bias2_ptr, M, N, K,
                    stride_y, eps, GEGLU: tl.constexpr, SWAP: tl.constexpr, BW: tl.constexpr,
                    BT: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr):
    """The adaRMS-normed GEMM (qkv; with GEGLU both gate and up and their GeGLU) on descriptor
    loads with lamp::ada_linear's prologue: rstd(x) * ((x * mod) @ W^T) + bias, x * mod made
    in the loop from the loaded x tile and its squares summed there. (The form without the
    prologue is the library's: triton_premade.premade_gemm.)"""
    pid = tl.program_id(0)
    toks = tl.arange(0, BT)
    ks = tl.arange(0, BK)
    if SWAP:
        acc = tl.zeros((BW, BT), dtype=tl.float32)
        acc2 = tl.zeros((BW, BT), dtype=tl.float32)
    else:
        acc = tl.zeros((BT, BW), dtype=tl.float32)
        acc2 = tl.zeros((BT, BW), dtype=tl.float32)
    sumsq = tl.zeros((BT,), dtype=tl.float32)
    for k in tl.range(0, K, BK, num_stages=STAGES):
        xf = x_desc.load([0, k]).to(tl.float32)
        sumsq += tl.sum(xf * xf, axis=1)
        x = (xf * tl.load(mod_ptr + k + ks)[None, :]).to(tl.bfloat16)
        w = w_desc.load([pid * BW, k])
        if SWAP:
            acc = tl.dot(w, tl.trans(x), acc)
        else:
            acc = tl.dot(x, tl.trans(w), acc)
        if GEGLU:
            w2 = w2_desc.load([pid * BW, k])
            if SWAP:
                acc2 = tl.dot(w2, tl.trans(x), acc2)
            else:
                acc2 = tl.dot(x, tl.trans(w2), acc2)
    if SWAP:
        acc = tl.trans(acc)
        acc2 = tl.trans(acc2)
    cols = pid * BW + tl.arange(0, BW)
    rstd = tl.rsqrt(sumsq / K + eps)
    y = acc * rstd[:, None] + tl.load(bias_ptr + cols)[None, :]
    if GEGLU:
        y = _gelu_tanh(y) * (acc2 * rstd[:, None] + tl.load(bias2_ptr + cols)[None, :])
    ok = (toks[:, None] < M) & (cols[None, :] < N)
    tl.store(y_ptr + toks[:, None] * stride_y + cols[None, :], y.to(y_ptr.dtype.element_ty),
             mask=ok)


class TmaAda:
    """One candidate of the normed GEMM: (norm, swap, bw, bk, stages, warps); norm 1 = the
    prologue form, 0 = the pre-made x * mod and sums-of-squares pieces."""

    def __init__(self, norm, swap, bw, bk, stages, warps):
        self.norm, self.swap, self.bw, self.bk, self.stages, self.warps = \
            norm, swap, bw, bk, stages, warps
        self.bt = 64

    def fits(self, n, k, geglu) -> bool:
        stage = ((1 + geglu) * self.bw + self.bt) * self.bk * 2
        return n % self.bw == 0 and self.stages * stage <= SMEM

    def __call__(self, xin, w, w2, mod, bias, bias2, pieces):
        if not self.norm:  # the library's kernel
            return tp.premade_gemm(xin, pieces, w, bias, 1e-6,
                                   [self.bw, self.bk, self.warps, self.stages, self.swap],
                                   weight2=w2, bias2=bias2)
        m, k = xin.shape
        n = w.shape[0]
        out = torch.empty((m, n), dtype=xin.dtype, device=xin.device)
        w_desc = TensorDescriptor.from_tensor(w, [self.bw, self.bk])
        _tma_ada_kernel[(n // self.bw,)](
            w_desc, TensorDescriptor.from_tensor(w2, [self.bw, self.bk]) if w2 is not None
            else w_desc, TensorDescriptor.from_tensor(xin, [self.bt, self.bk]), out, mod, bias,
            bias2 if bias2 is not None else bias, m, n, k, out.stride(0), 1e-6,
            GEGLU=w2 is not None, SWAP=self.swap, BW=self.bw, BT=self.bt, BK=self.bk,
            STAGES=self.stages, num_warps=self.warps)
        return out

    def name(self) -> str:
        form = 'prologue' if self.norm else 'pre-made'
        return f"tma {form} swap{self.swap} bw{self.bw} bk{self.bk} st{self.stages} w{self.warps}"


def ada_candidates(n, k, geglu) -> list:
    out = []
    for norm, swap, bw, bk, stages, warps in itertools.product(
            (1, 0), (1, 0), (32, 64, 128), (64, 128), (3, 4, 6, 8), (4,)):
        if swap and bw < 64:
            continue
        c = TmaAda(norm, swap, bw, bk, stages, warps)
        if c.fits(n, k, geglu) and 40 <= n // bw <= 600:
            out.append(c)
    return out


def time_ada(part, report) -> None:
    """qkv / gate_up with their adaRMS norm (and GeGLU): today's two library kernels (+ the
    GeGLU kernel) around cuBLAS, the lamp kernel's prologue form at the build's tiling, and the
    descriptor-load candidates; 18 layers' weights per launch, us per layer."""
    dev = 'cuda'
    n, k = PARTS[part]
    geglu = part == 'gate_up'
    n_out = n // 2 if geglu else n
    ws = [(torch.randn(n, k, device=dev) / k ** 0.5).to(torch.bfloat16) for _ in range(LAYERS)]
    halves = [w.chunk(2) if geglu else (w, None) for w in ws]
    halves = [(a.contiguous(), b.contiguous() if b is not None else None) for a, b in halves]
    x = torch.randn(ROWS, k, device=dev).to(torch.bfloat16)
    mod = 1 + torch.randn(k, device=dev) / 10
    scale, shift = (mod - 1).to(torch.bfloat16), (torch.randn(k, device=dev) / 10)
    bias = [shift @ a.float().t() for a, _ in halves]
    bias2 = [shift @ b.float().t() if b is not None else None for _, b in halves]
    # the pre-made input: x * mod in bf16 and 32 pieces of the rows' sums of squares (the
    # previous kernel's epilogue would write them, one piece per 32-column block)
    xm = (x.float() * mod).to(torch.bfloat16)
    pieces = torch.zeros(32, 64, device=dev)
    pieces[:, :ROWS] = (x.float() ** 2).reshape(ROWS, 32, k // 32).sum(-1).t()

    def reference(i):
        a, b = halves[i]
        r = torch.rsqrt((x.float() ** 2).mean(-1, keepdim=True) + 1e-6)
        g = r * ((x.float() * mod) @ a.float().t()) + bias[i]
        if b is None:
            return g
        u = r * ((x.float() * mod) @ b.float().t()) + bias2[i]
        return F.gelu(g, approximate='tanh') * u
    want = reference(0)
    row = {'weight_mb': n * k * 2 / 1e6}

    def library():
        for w in ws:
            h = F.linear(tk.rms_norm(x, scale, shift.to(torch.bfloat16), 1e-6), w)
            if geglu:
                tk.geglu(*h.chunk(2, -1))
    row['library (norm, cuBLAS[, geglu])'] = {'us': per_layer_us(library)}
    tiles = LAMP_ADA_TILES[part]
    counters = torch.zeros(4096, dtype=torch.int32, device=dev)

    def lamp():
        for i, (a, b) in enumerate(halves):
            te.expert_gemm(x, a, tiles, counters=counters, weight2=b, mod=mod, bias=bias[i],
                           bias2=bias2[i], eps=1e-6)
    row[f'lamp prologue {tiles}'] = {'us': per_layer_us(lamp)}
    t0 = time.time()
    for c in ada_candidates(n_out, k, geglu):
        xin = x if c.norm else xm
        try:
            got = c(xin, halves[0][0], halves[0][1], mod, bias[0], bias2[0], pieces).float()
            err = float((got - want).abs().max() / want.abs().max())
            row[c.name()] = {'us': per_layer_us(lambda: [
                c(xin, a, b, mod, bias[i], bias2[i], pieces)
                for i, (a, b) in enumerate(halves)]), 'rel_error': err}
        except Exception as exc:  # a tiling the compiler or the GPU refuses
            row[c.name()] = {'failed': f'{type(exc).__name__}: {str(exc)[-160:]}'}
    show(f'{part} normed', row, time.time() - t0)
    report['normed'][part] = row


def show(title, row, seconds) -> None:
    timed = {name: v for name, v in row.items() if isinstance(v, dict) and 'us' in v}
    best = sorted(timed.items(), key=lambda kv: kv[1]['us'])
    keep = best[:6] + [kv for kv in best[6:] if not kv[0].startswith('tma')]
    for form in ('prologue', 'pre-made'):
        keep += [kv for kv in best[6:] if form in kv[0]][:1]
    mb = row['weight_mb']
    print(f'{title} ({mb:.1f} MB, {seconds:.0f} s):', flush=True)
    for name, v in keep:
        print(f"  {name:44s} {v['us']:6.2f} us  {mb / v['us']:.2f} TB/s"
              f"  err {v.get('rel_error', 0):.1e}", flush=True)


class TmaGemm:
    """One candidate: (swap, bw, bk, stages, splits, warps)."""

    def __init__(self, swap, bw, bk, stages, splits, warps):
        self.swap, self.bw, self.bk, self.stages, self.splits, self.warps = \
            swap, bw, bk, stages, splits, warps
        self.bt = 64  # the 50 tokens, padded by the copy engine

    def fits(self, n, k) -> bool:
        stage = (self.bw + self.bt) * self.bk * 2
        return n % self.bw == 0 and k % (self.bk * self.splits) == 0 \
            and self.stages * stage <= SMEM and k // self.splits >= self.bk * 2

    def __call__(self, x, w, counters):
        m, k = x.shape
        n = w.shape[0]
        programs = n // self.bw
        out = torch.empty((m, n), dtype=x.dtype, device=x.device)
        part = torch.empty((self.splits, programs, self.bt, self.bw), dtype=torch.float32,
                           device=x.device) if self.splits > 1 else out
        _tma_gemm_kernel[(programs, self.splits)](
            TensorDescriptor.from_tensor(w, [self.bw, self.bk]),
            TensorDescriptor.from_tensor(x, [self.bt, self.bk]), out, part, counters, m, n,
            k // self.splits, out.stride(0), SWAP=self.swap, BW=self.bw, BT=self.bt,
            BK=self.bk, SPLITS=self.splits, STAGES=self.stages, num_warps=self.warps)
        return out

    def name(self) -> str:
        return (f"tma swap{self.swap} bw{self.bw} bk{self.bk} st{self.stages} "
                f"sp{self.splits} w{self.warps}")


def candidates(n, k) -> list:
    out = []
    for swap, bw, bk, stages, splits, warps in itertools.product(
            (1, 0), (32, 64, 128), (64, 128), (4, 8), (1, 2, 4, 8), (4,)):
        if swap and bw < 64:
            continue  # a wgmma's M side is 64 rows a warpgroup
        c = TmaGemm(swap, bw, bk, stages, splits, warps)
        programs = n // bw * splits
        if c.fits(n, k) and 40 <= programs <= 600:
            out.append(c)
    return out


def per_layer_us(fn, runs=40) -> float:
    """fn() makes the 18 layers' calls; the graph of them replayed, median per layer."""
    times, _ = graph_replay_ms(fn, runs, warmups=2)
    return 1e3 * sorted(times)[len(times) // 2] / LAYERS


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--parts', default=','.join(PARTS))
    parser.add_argument('--normed', default='qkv,gate_up',
                        help='parts also timed with their adaRMS norm (and GeGLU) fused')
    parser.add_argument('--out', default='')
    args = parser.parse_args()
    torch.manual_seed(0)
    dev = 'cuda'
    counters = torch.zeros(4096, dtype=torch.int32, device=dev)
    report = {'gpu': torch.cuda.get_device_name(), 'rows': ROWS, 'layers': LAYERS, 'parts': {},
              'normed': {}}
    for part in filter(None, args.normed.split(',')):
        time_ada(part, report)
        save_report(report, args.out)
    for part in filter(None, args.parts.split(',')):
        n, k = PARTS[part]
        ws = [(torch.randn(n, k, device=dev) / k ** 0.5).to(torch.bfloat16)
              for _ in range(LAYERS)]
        x = torch.randn(ROWS, k, device=dev).to(torch.bfloat16)
        want = (x.float() @ ws[0].float().T)
        row = {'weight_mb': n * k * 2 / 1e6}
        row['cublas'] = {'us': per_layer_us(lambda: [F.linear(x, w) for w in ws])}
        tiles = LAMP_TILES[part]
        row[f'lamp {tiles}'] = {'us': per_layer_us(
            lambda: [te.expert_gemm(x, w, tiles, counters=counters) for w in ws])}
        t0 = time.time()
        for c in candidates(n, k):
            try:
                got = c(x, ws[0], counters).float()
                err = float((got - want).abs().max() / want.abs().max())
                row[c.name()] = {'us': per_layer_us(lambda: [c(x, w, counters) for w in ws]),
                                 'rel_error': err}
            except Exception as exc:  # a tiling the compiler or the GPU refuses
                row[c.name()] = {'failed': f'{type(exc).__name__}: {str(exc)[-160:]}'}
        show(part, row, time.time() - t0)
        report['parts'][part] = row
        save_report(report, args.out)


if __name__ == '__main__':
    main()
