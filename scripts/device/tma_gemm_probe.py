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

    python3 scripts/device/tma_gemm_probe.py [--parts qkv,gate_up] [--out FILE.json]
"""

import argparse
import itertools
import json
import time

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from lamp_ros.kernels import triton_expert as te

ROWS, LAYERS = 50, 18
PARTS = {'qkv': (2560, 1024), 'o': (1024, 2048), 'gate_up': (8192, 1024), 'down': (1024, 4096)}
# the build's tilings of the lamp kernel on the H200 (plain, no epilogue here)
LAMP_TILES = {'qkv': [64, 16, 128, 4, 4, 1, 0], 'o': [64, 32, 128, 4, 4, 4, 0],
              'gate_up': [64, 32, 128, 4, 4, 1, 0], 'down': [64, 32, 128, 4, 4, 4, 0]}
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
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        fn()
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    times = []
    for _ in range(runs):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return 1e3 * sorted(times)[len(times) // 2] / LAYERS


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--parts', default=','.join(PARTS))
    parser.add_argument('--out', default='')
    args = parser.parse_args()
    torch.manual_seed(0)
    dev = 'cuda'
    counters = torch.zeros(4096, dtype=torch.int32, device=dev)
    report = {'gpu': torch.cuda.get_device_name(), 'rows': ROWS, 'layers': LAYERS, 'parts': {}}
    for part in args.parts.split(','):
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
        timed = {name: v for name, v in row.items() if isinstance(v, dict) and 'us' in v}
        best = sorted(timed.items(), key=lambda kv: kv[1]['us'])[:6]
        mb = row['weight_mb']
        print(f'{part} ({n}x{k}, {mb:.1f} MB, {time.time() - t0:.0f} s):', flush=True)
        for name, v in best + [('cublas', row['cublas'])]:
            print(f"  {name:36s} {v['us']:6.2f} us  {mb / v['us']:.2f} TB/s"
                  f"  err {v.get('rel_error', 0):.1e}", flush=True)
        report['parts'][part] = row
        if args.out:
            with open(args.out, 'w', encoding='utf-8') as f:
                json.dump(report, f, indent=1)


if __name__ == '__main__':
    main()
