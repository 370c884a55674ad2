"""Does a warpgroup MMA (wgmma) with both operands in shared memory compute the right tile when
built here through NVRTC for sm_90a? The next step of the persistent expert after
nvrtc_hopper_check.py (bulk copies into shared memory at 4.2 TB/s): its consumer warpgroups
multiply the weight tiles where the copies leave them, with no register loads of the operands.

One warpgroup (128 threads) computes D (64 x 64, float32) = A (64 x K) @ B (64 x K)^T in bf16,
K = 64 as four k-steps of 16, A and B stored K-major (B is a weight block as the expert stores
it: (N, K) rows) in the no-swizzle layout: 8 x 8 "core matrices" of 128 contiguous bytes, the
core matrix of rows 8i.. and columns 8j.. at byte i * SBO + j * LBO, with LBO = 128 (the next
one along K) and SBO = K * 16 (the next 8 rows). Each thread's 32 accumulators are written out
raw, and the report says

- for the descriptor as CUTLASS builds it (leading byte offset = the K-direction step) and with
  the two offsets swapped: the largest error against A @ B^T read through the m64nNk16 float32
  fragment layout (thread t = 32 w + l holds rows 16 w + l / 4 (+ 8), columns 8 j + 2 (l % 4)
  (+ 1) of every 8-column chunk j), and
- what share of the raw accumulators equal some entry of A @ B^T at all (1.0 with a wrong
  fragment layout guess but right descriptors; low with wrong descriptors).

Then the same instruction fed by bulk copies: `stream_gemm` (STREAM below) at the expert's two
K = 1024 GEMMs, 64 rows, both operands packed by the host into tiles whose bytes are the shared
memory layout, timed per layer on 18 distinct weights (HBM) against cuBLAS on the same, once as
one launch per layer and once as one launch that streams all 18 layers' weights (persistent: the
next layer's tiles land while this layer's MMAs run; no layer waits for another's output here).

    python3 scripts/device/wgmma_check.py [--out FILE.json] [--tile-only]

Measured on the H200 (2026-12-01, bench/results/wgmma_check_h200.json): the tile is right with
the descriptor as CUTLASS builds it (max error 1.3e-7 of max |D|, i.e. float32 rounding; the
fragment layout above confirmed) and wrong with the offsets swapped (1.42). stream_gemm is right
in every form (max error 1.5e-6). One launch per layer it loses to cuBLAS (gate/up 64 x 8192 x
1024: 7.9-9.3 us in earlier runs and this one at its best form against 7.4-7.6; qkv 64 x 2560 x
1024: 5.5-6.3 us against 5.2); streaming all 18 layers from one launch it wins: gate/up 5.82 us
a layer (2 K slices, ring of 4, MMAs overlapping the next tile's arrival; 5.92 in one slice with
a ring of 8) against cuBLAS 7.56, 2.9 TB/s; qkv 3.71 us (2 K slices) against 5.15. Waiting for
each tile's MMAs before refilling its slot costs 2 us a layer (7.9). What a persistent expert
still needs on top: a layer's X is the previous part's output (a grid-wide wait between parts,
1.1-1.8 us each, measured in sync_cost.py and persistent_chain_probe.py, while the weight stream
keeps going), a producer warp apart from the MMA warpgroup, X through a cluster instead of re-read
per block, the on-chip split-K sums, and the compiler packing the weights into these tiles.

B read MN-major (`--tile-only`, 2026-12-01, bench/results/wgmma_check_trans_b_h200.json): B given
as a (K, N) matrix, stored by the same packing (the core matrix of k 8i.. and n 8j.. at
1024 i + 128 j) and read with the transpose bit, is right with LBO = 1024 (the step to the next
8 of K) and SBO = 128 (the next 8 of N), as CUTLASS's canonical MN-major layout has it (error
1.3e-7); the offsets the other way round read outside the tile (an illegal address). So an
attention can read V as the prefix stores it, rows of keys, with no transpose into V^T.
"""

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.getcwd())
from bench.hopper_ptx import HELPERS, mma_tile_source, pack_tiles, wgmma_asm  # noqa: E402
from bench.probes import save_report  # noqa: E402

K = 64
N = 64
REGS = N // 2  # float32 accumulators per thread for m64nNk16

SOURCE = HELPERS + r'''

extern "C" __global__ void __launch_bounds__(128, 1)
wgmma_tile(const unsigned short* A, const unsigned short* B, float* raw, int swap) {
    extern __shared__ __align__(128) unsigned char smem[];
    const int K = __K__;
    unsigned char* sa = smem;
    unsigned char* sb = smem + 64 * K * 2;
    for (int i = threadIdx.x; i < 64 * K; i += blockDim.x) {
        int r = i / K, k = i % K;
        unsigned at = (r / 8) * (K * 16) + (k / 8) * 128 + (r % 8) * 16 + (k % 8) * 2;
        *(unsigned short*)(sa + at) = A[i];
        *(unsigned short*)(sb + at) = B[i];
    }
    // generic-proxy writes of shared memory, read by the async proxy (wgmma)
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    float d[__REGS__];
    for (int r = 0; r < __REGS__; r++) d[r] = 0.f;
    unsigned lbo = swap ? K * 16 : 128, sbo = swap ? 128 : K * 16;
#ifdef TRANS_B  // B given as (K, N), N contiguous, stored by the same formula (K = N here): the
    // core matrix of k 8i.. and n 8j.. at 8i (N 16) + 128 j, read MN-major; A as proven
    const unsigned alo = 128, aso = K * 16, bstep = 2 * K * 16;
    const unsigned blo = swap ? 128 : K * 16, bso = swap ? K * 16 : 128;
#else
    const unsigned alo = lbo, aso = sbo, bstep = 256, blo = lbo, bso = sbo;
#endif
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    for (int s = 0; s < K / 16; s++) {
        u64 da = descriptor(smem_addr(sa) + 256 * s, alo, aso);
        u64 db = descriptor(smem_addr(sb) + bstep * s, blo, bso);
        __WGMMA__
    }
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    for (int r = 0; r < __REGS__; r++) raw[threadIdx.x * __REGS__ + r] = d[r];
}
'''


# Y_l (64 x N) = X (64 x K) @ W_l (N x K)^T for `layers` weights W_l in one launch, the operands
# packed by the host into 8 KB tiles (64 rows x 64 of K, the core-matrix layout above: LBO 128,
# SBO 1024), so that one 1-D bulk copy puts a tile where the wgmma reads it. Block (b, s) owns
# columns [64 b, 64 b + 64) over slice s of K (gridDim.y slices; each slice's partial Y goes to
# its own plane: the sum would be on chip in a real kernel). Its tiles, layer after layer, are one
# stream: thread 0 keeps NBUF - 1 of them in flight (W tile into a ring slot; in the first layer
# also the X tile, into its own place, where X stays), each counted in bytes by the slot's
# mbarrier, so the next layer's weights land while this layer's MMAs run (what a persistent
# expert would do; here no layer waits for another's output). The warpgroup waits for a tile and
# runs its four m64n64k16 wgmma. OVERLAP 0: it waits for them before the slot is refilled;
# OVERLAP 1: only for the previous tile's (wait_group 1), so the MMAs run while the next lands.
STREAM = HELPERS + r'''
__MMA_TILE__
#define NBUF __NBUF__
#define TILE 8192
extern "C" __global__ void __launch_bounds__(128, 1)
stream_gemm(const unsigned char* X, const unsigned char* W, float* Y, int n, int all_ktiles,
            int layers) {
    extern __shared__ __align__(1024) unsigned char smem[];
    __shared__ __align__(8) u64 bars[NBUF];
    const int ktiles = all_ktiles / gridDim.y, k0 = blockIdx.y * ktiles, total = layers * ktiles;
    unsigned char* sx = smem;
    unsigned char* sw = smem + ktiles * TILE;
    X += (long long)k0 * TILE;
    // tile g of this block's stream: layer g / ktiles, k-tile g % ktiles of its slice
    #define W_TILE(g) (W + (((long long)((g) / ktiles) * gridDim.x + blockIdx.x) * all_ktiles \
                            + k0 + (g) % ktiles) * TILE)
    #define FETCH(g) do { unsigned bar_ = smem_addr(&bars[(g) % NBUF]); \
        expect_bytes(bar_, (g) < ktiles ? 2 * TILE : TILE); \
        if ((g) < ktiles) bulk_copy_to(sx + (g) * TILE, X + (long long)(g) * TILE, TILE, bar_); \
        bulk_copy_to(sw + ((g) % NBUF) * TILE, W_TILE(g), TILE, bar_); } while (0)
    if (threadIdx.x == 0) {
        for (int b = 0; b < NBUF; b++)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_addr(&bars[b])));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        for (int g = 0; g < NBUF - 1 && g < total; g++) FETCH(g);
    }
    __syncthreads();
    float d[__REGS__];
    for (int r = 0; r < __REGS__; r++) d[r] = 0.f;
    unsigned phases = 0;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int g = 0; g < total; g++) {
        int i = g % ktiles, buf = g % NBUF, ahead = g + NBUF - 1;
        if (!__OVERLAP__ && threadIdx.x == 0 && ahead < total) FETCH(ahead);  // read before
        wait_phase(smem_addr(&bars[buf]), (phases >> buf) & 1u);
        phases ^= 1u << buf;
        mma_tile(d, sx + i * TILE, sw + buf * TILE);
        if (__OVERLAP__) {
            asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
            __syncthreads();  // the previous tile's slot is read by everyone: refill it
            if (threadIdx.x == 0 && ahead < total) FETCH(ahead);
        } else {
            asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
            __syncthreads();  // the slot is read by everyone before thread 0 refills it
        }
        if (i == ktiles - 1) {  // the layer's last k-tile: its Y plane out, accumulators reset
            asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
            float* y = Y + ((long long)(g / ktiles) * gridDim.y + blockIdx.y) * 64 * n;
            for (int r = 0; r < __REGS__; r++) {
                int row = 16 * warp + lane / 4 + 8 * ((r % 4) / 2);
                int col = 64 * blockIdx.x + 8 * (r / 4) + 2 * (lane % 4) + r % 2;
                y[row * n + col] = d[r];
                d[r] = 0.f;
            }
        }
    }
}
'''


def tile_source(trans_b: bool = False) -> str:
    """The CUDA source of `wgmma_tile` (one tile, K = K) as this probe compiles it; trans_b:
    B given as (K, N) and read MN-major (the transpose bit), A as before."""
    return ('#define TRANS_B\n' if trans_b else '') + SOURCE.replace('__K__', str(K)) \
        .replace('__REGS__', str(REGS)).replace('__WGMMA__', wgmma_asm(N, trans_b))


def stream_source(nbuf: int, overlap: int) -> str:
    """The CUDA source of `stream_gemm` with a ring of `nbuf` tiles, MMAs overlapping the next
    tile's arrival or not, as this probe compiles it."""
    return STREAM.replace('__MMA_TILE__', mma_tile_source(N)).replace('__NBUF__', str(nbuf)) \
        .replace('__REGS__', str(REGS)).replace('__OVERLAP__', str(overlap))


# the stream forms timed: (ring slots, overlap, K slices)
STREAM_FORMS = ((4, 0, 1), (8, 0, 1), (8, 1, 1), (4, 1, 2), (4, 1, 4))


def stream_section(report: dict) -> None:
    """stream_gemm at the expert's K = 1024 GEMMs (qkv, gate/up): right numbers, and its time per
    layer on 18 distinct weights (HBM) against cuBLAS on the same: one launch per layer, and one
    launch streaming all 18 layers' weights (persistent)."""
    from torch.nn import functional as F
    from lamp_ros.kernels import tuning
    layers = 18
    for name, n in (('gate_up', 8192), ('qkv', 2560)):
        k = 1024
        x = torch.randn(64, k, device='cuda').to(torch.bfloat16)
        ws = [(torch.randn(n, k, device='cuda') / k ** 0.5).to(torch.bfloat16)
              for _ in range(layers)]
        xp, wps = pack_tiles(x), [pack_tiles(w) for w in ws]
        w_all = torch.cat(wps)
        want = torch.stack([x.float() @ w.float().t() for w in ws])
        row = {'cublas_us': round(tuning.gpu_time_ms(
            lambda: [F.linear(x, w) for w in ws]) * 1e3 / layers, 2)}
        for nbuf, overlap, splits in STREAM_FORMS:
            try:
                kernel = torch.cuda._compile_kernel(stream_source(nbuf, overlap), 'stream_gemm',
                                                    compute_capability='90a')
                smem = (k // 64 // splits + nbuf) * 8192
                kernel.set_shared_memory_config(smem)
                y = torch.zeros(layers, splits, 64, n, device='cuda')

                def launch(weights, count, out):
                    kernel(grid=(n // 64, splits, 1), block=(128, 1, 1),
                           args=[xp, weights, out, n, k // 64, count], shared_mem=smem)
            except Exception as exc:
                row[f'ring {nbuf} overlap {overlap} k-slices {splits}'] = \
                    f'failed: {type(exc).__name__}: {str(exc)[-1200:]}'
                continue
            for persistent in (False, True):
                key = f'{"persistent, " if persistent else ""}ring {nbuf} overlap {overlap} ' \
                    f'k-slices {splits}'
                try:
                    y.zero_()
                    if persistent:
                        def run():
                            launch(w_all, layers, y)
                    else:
                        def run():
                            for i in range(layers):
                                launch(wps[i], 1, y[i])
                    run()
                    torch.cuda.synchronize()
                    err = float((y.sum(1) - want).abs().max() / want.abs().max())
                    us = tuning.gpu_time_ms(run) * 1e3 / layers
                    row[key] = {'max_rel_error': err, 'us': round(us, 2),
                                'TBps': round(n * k * 2 / (us * 1e-6) / 1e12, 2)}
                except Exception as exc:
                    row[key] = f'failed: {type(exc).__name__}: {str(exc)[-1200:]}'
                print(name, key, row[key], flush=True)
        report[f'stream {name} 64x{n}x{k}'] = row


def fragment_rows_cols():
    """(thread, register) -> (row, column) of D in the m64nNk16 float32 fragment layout."""
    t = torch.arange(128)[:, None]
    r = torch.arange(REGS)[None, :]
    warp, lane, chunk, slot = t // 32, t % 32, r // 4, r % 4
    rows = 16 * warp + lane // 4 + 8 * (slot // 2)
    cols = 8 * chunk + 2 * (lane % 4) + slot % 2
    return rows, cols


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--out', default='wgmma_check.json')
    parser.add_argument('--tile-only', action='store_true',
                        help='the one-tile checks only, not the stream GEMM timings')
    args = parser.parse_args()
    torch.manual_seed(0)
    report = {'gpu': torch.cuda.get_device_name(), 'torch': torch.__version__,
              'shape': f'm64n{N}k16 x {K // 16} k-steps, bf16 -> f32, A K-major, B K-major '
                       'then MN-major, no swizzle'}
    a = torch.randn(64, K, device='cuda').to(torch.bfloat16)
    b = torch.randn(N, K, device='cuda').to(torch.bfloat16)
    want = a.float() @ b.float().t()
    # B K-major, as the expert stores a weight: (N, K) rows; then B MN-major: (K, N) rows read
    # with the transpose bit (the form an attention's V would be read in without a transpose)
    for trans_b, bmat in ((False, b), (True, b.t().contiguous())):
        try:
            kernel = torch.cuda._compile_kernel(tile_source(trans_b), 'wgmma_tile',
                                                compute_capability='90a')
            kernel.set_shared_memory_config(2 * 64 * K * 2)
        except Exception as exc:
            report[f'compile trans_b={int(trans_b)}'] = \
                f'failed: {type(exc).__name__}: {str(exc)[-1500:]}'
            continue
        for swap in (0, 1):
            key = f'swap={swap}' + (' trans_b' if trans_b else '')
            report[key] = tile_case(kernel, a, bmat, want, swap, trans_b)
            print(key, report[key], flush=True)
    save_report(report, args.out)
    if args.tile_only:
        return None
    stream_section(report)
    print(json.dumps(report, indent=1), flush=True)
    return save_report(report, args.out)


def tile_case(kernel, a, bmat, want, swap: int, trans_b: bool):
    """One wgmma_tile launch -> its errors against `want` (the offsets of B's descriptor: K-major
    LBO 128 / SBO K * 16, MN-major the other way round; swap exchanges them)."""
    rows, cols = fragment_rows_cols()
    raw = torch.zeros(128, REGS, device='cuda')
    try:
        operands = [a.view(torch.int16), bmat.view(torch.int16), raw, swap]
        kernel(grid=(1, 1, 1), block=(128, 1, 1), args=operands, shared_mem=2 * 64 * K * 2)
        torch.cuda.synchronize()
    except Exception as exc:
        return f'failed: {type(exc).__name__}: {str(exc)[-600:]}'
    raw, ref = raw.cpu(), want.cpu()
    got = ref.clone().fill_(float('nan'))
    got[rows, cols] = raw
    scale = ref.abs().max()
    nearest = (raw.reshape(-1, 1) - ref.reshape(1, -1)).abs().min(dim=1).values
    lbo, sbo = (K * 16, 128) if bool(swap) != trans_b else (128, K * 16)
    return {'b_lbo_bytes': lbo, 'b_sbo_bytes': sbo,
            'max_rel_error_fragment_layout': float((got - ref).abs().max() / scale),
            'share_of_accumulators_found_in_reference': float(
                (nearest <= 1e-3 * scale).float().mean())}


if __name__ == '__main__':
    main()
