"""The expert's MLP half as one persistent kernel: does the wgmma + bulk-copy weight stream that
beat cuBLAS in wgmma_check.py keep its lead when each GEMM waits for the previous one's output?

wgmma_check.py streamed 18 layers' weights from one launch with no layer waiting for another
(gate/up 5.82 us a layer against cuBLAS 7.56). A persistent expert chains its parts: here, per
layer (50 rows of 1024, horizon 50; padded to 64 rows for the m64 wgmma),

    phase A   H = gelu_tanh(G) * U,  [G | U] = adaRMS(X) @ [Wg | Wu]^T    (1024 -> 2 x 4096)
    phase B   X' = X + gate * (H @ Wd^T)                                   (4096 -> 1024)

with adaRMS(X) = X / rms(X) * scale + shift, the timestep's scale, shift and gate given (the
compiler precomputes them). One launch runs all layers: 128 blocks of one warpgroup, each owning
one item per phase (A: 32 gate and the matching 32 up columns, full K; B: 64 output columns over
one of 8 K slices), with a grid-wide barrier after each phase. Every block streams its weight
tiles (8 KB, packed by the host in the wgmma no-swizzle layout, 24 per layer) through one ring
of bulk copies, so the next phase's weights land while the block waits at the barrier; the
activation tiles come by bulk copy from buffers the previous phase wrote in the same packed
layout. The norm is folded: phase B's sum of each column tile writes X * scale (the next
layer's, packed) and its rows' sums of squares, phase A multiplies its accumulators by the rows'
1 / rms and adds shift @ W^T (precomputed, `bias`). Split-K sums are in K-slice order, so the
result is the same every run. The kernel is launched cooperatively (every block resident, or
an error): its grid-wide barriers hang otherwise (bench/results/README.md,
"Cooperative launches").

It reports the error against a float32 torch reference with the same bf16 roundings, whether two
runs are bit-identical, and the time per layer of every form in FORMS (the design's choices,
one at a time, and diagnostic forms that take a stream away) beside the same MLP half as torch
ops in one CUDA graph (rms_norm, cuBLAS gate/up, GeGLU, cuBLAS down, gated residual); for the
forms in TIMELINES, where a layer's time goes, from globaltimer stamps of every block (summary
in the report, every block's timeline as a Chrome / Perfetto trace beside it), and a picture.
A watchdog form of each (every spin gives up after 2 s and records where) runs first.

    PYTHONPATH=$PWD timeout 300 python3 scripts/device/mlp_chain_probe.py [--out FILE.json]
    MLP_CHAIN_FORMS=16,21,22 MLP_CHAIN_TIMELINES=0,6 ...   (only those forms and timelines)

First run on the H200 on 2026-12-01: bench/results/mlp_chain_probe_h200.json and .png. The
'counters for barriers' forms (later that day, bench/results/h200_mlp_chain_counters/, two runs
of MLP_CHAIN_FORMS=4,21,16,22): 16.34 -> 15.10 and 16.23 -> 14.97 us per layer, same numbers.
X multicast to clusters (mlp_chain_probe_multicast_h200.json there): same numbers, slower
(clusters of 2: 15.87 against 15.02 us; clusters of 4 cannot all be resident), see
bench/results/README.md.
Trimmed activation copies (mlp_chain_probe_trim_h200.json): 15.14 -> 15.06, 15.07 -> 14.92 us.
'Epilogue constants loaded early' (FORMS[28], TIMELINES[9]; mlp_chain_probe_epi_h200.json):
15.04 -> 14.59 us per layer, same numbers; its phase A epilogue 1.5 -> 1.25 us.
"""

import json
import os
import sys
from dataclasses import dataclass

import torch

sys.path.insert(0, os.getcwd())
from bench.hopper_ptx import (BF16_BITS, GRID_SYNC, HELPERS, LAST_TO_ARRIVE,  # noqa: E402
                              LOAD_CG, launch_cooperative, mma_tile_source, pack_tiles)
from bench.probes import run_sections  # noqa: E402

ROWS, PAD, WIDTH, MLP, LAYERS = 50, 64, 1024, 4096, 18
TILE = 8192  # bytes: 64 rows x 64 of K, bf16
KA = WIDTH // 64  # phase A k-tiles (full K)
SPLITS = 8  # phase B K slices
KB = MLP // 64 // SPLITS  # phase B k-tiles per slice
NT_B = WIDTH // 64  # phase B column tiles
BLOCKS = MLP // 32  # = NT_B * SPLITS = 128
TILES_PER_LAYER = KA + KB
EPS = 1e-6
A_PER_SLICE = KB * 64 // 32  # phase A blocks (32 H columns each) whose H one phase B slice reads
FLAG_STRIDE = 32  # ints between the flags forms' counters: one 128-byte line each
assert BLOCKS == NT_B * SPLITS

PRELUDE = r'''
// 1: warp-specialized: a fifth warp refills the weight ring as the MMA warpgroup frees slots
// (an 'empty' mbarrier per slot), so no CTA barrier or refill sits in the MMA loop; the
// warpgroup's own CTA-wide waits (the helpers' too) become named barrier 1 over its 128 threads
#define WS __WS__
#if WS
#define CTA_SYNC() asm volatile("bar.sync 1, 128;" ::: "memory")
#else
#define CTA_SYNC() __syncthreads()
#endif
#define ALL_SYNC() __syncthreads()
'''
SOURCE = '\n'.join((PRELUDE, HELPERS, BF16_BITS, GRID_SYNC, LOAD_CG, LAST_TO_ARRIVE,
                    '__MMA_TILE__')) + r'''
#define NBUF __NBUF__
#define TILE 8192
#define KA __KA__
#define KB __KB__
#define NT_B __NT_B__
#define SPLITS __SPLITS__
#define WIDTH __WIDTH__
#define VROWS __ROWS__
#define PER_LAYER (KA + KB)
#define WATCHDOG __WATCHDOG__
#define STAMPS __STAMPS__
#define SPREAD __SPREAD__  // phase B's split-K sum: 0 the tile's last block, 1 all 8 of them
// 1: each phase asks HBM for the next phase's weights into L2 as it starts, 2: once its MMAs
// are done (through its epilogue and barrier)
#define PREFETCH __PREFETCH__
#define TPS __TPS__  // weight tiles per step of the MMA loop (one CTA barrier per step)
// diagnostic forms, timed for where the time goes, their numbers wrong by design: 1 every layer
// streams layer 0's weights (25 MB, hot in L2), 2 no activation tiles are copied (or waited
// for), 3 no MMAs (the tiles still arrive and are waited for)
#define DIAG __DIAG__
#define ACC __ACC__  // accumulator sets (divides TPS: set j % ACC of a step's tile j)
// 1: counters in place of the grid barriers between phases: phase B's block of K slice s waits
// only for the A_PER_SLICE phase A blocks that wrote that slice's H (a counter per slice), and
// phase A waits for all phase B blocks on one counter that only grows (no reset, no generation
// word: the waiters see the last arrival itself); the last layer ends on the grid barrier,
// after which block 0 zeroes the counters for the next launch
#define FLAGS __FLAGS__
#define A_PER_SLICE __A_PER_SLICE__
#define FLAG(i) (count + __FLAG_STRIDE__ * (1 + (i)))  // i < SPLITS: slice i; SPLITS: phase B
// > 1: the blocks run in clusters of that many, and phase A's activation tiles (the same X for
// every block) are each read from L2 once per cluster: tile i by the block of cluster rank
// i % CLUSTER, multicast into the same place of every block's shared memory, its bytes counted
// on each block's own mbarrier for that tile
#define CLUSTER __CLUSTER__
// 1: an activation tile's copy stops after the row groups that hold the VROWS real rows (7 KB
// of 8 at 50 rows): the MMA's rows past them read whatever the shared memory held, and their
// results are never stored (the epilogues write zeros there), so less comes into the SM
#define TRIM __TRIM__
#define XBYTES (TRIM ? (VROWS + 7) / 8 * 1024 : TILE)
// 1: the epilogues' per-layer constants (phase A: the bias of the thread's 16 gate/up columns;
// phase B: the gate and next scale of its 4 columns) are loaded into registers as the phase
// starts, so that their trip to memory (the weight stream has long evicted them) overlaps the
// MMAs instead of opening the epilogue (spread sum only)
#define EPI_PREFETCH __EPI_PREFETCH__

#if CLUSTER > 1
__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
// every thread of every block of the cluster: what each did before (its mbarriers' init) is
// seen by the others after
__device__ __forceinline__ void cluster_sync_all() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n"
                 "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ void bulk_multicast(unsigned char* to, const unsigned char* from,
                                               unsigned bytes, unsigned bar,
                                               unsigned short blocks) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
                 ".multicast::cluster [%0], [%1], %2, [%3], %4;"
                 :: "r"(smem_addr(to)), "l"(from), "r"(bytes), "r"(bar), "h"(blocks)
                 : "memory");
}
#endif

#define ARRIVE(mbar) asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" \
                                 :: "r"(smem_addr(&(mbar))) : "memory")

// the next phase's weights beyond what the ring holds ahead, HBM -> L2 (the ring alone stops
// asking once it is full, and HBM idles through the epilogue and the barrier)
#define PREFETCH_NEXT_PHASE() do { \
    const int next = phase ? (l + 1) * PER_LAYER : l * PER_LAYER + KA; \
    const int tiles = phase ? KA : KB; \
    if (next + tiles <= total) \
        for (int j = NBUF - TPS; j < tiles; j++) prefetch_l2(W_TILE(next + j), TILE); \
    } while (0)

__device__ __forceinline__ void prefetch_l2(const unsigned char* p, unsigned bytes) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(p), "r"(bytes) : "memory");
}

__device__ __forceinline__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
#if STAMPS
// a timeline: per block, layer and phase, the times its thread 0 starts the phase, has the
// phase's MMAs done, and ends its epilogue (before the grid barrier); then, after those, per
// block, layer and k-tile (the layer's KA + KB), the time both its tiles had arrived
#define STAMP(k) do { if (tid == 0) \
    stamps[(((long long)b * layers + l) * 2 + phase) * 3 + (k)] = now_ns(); } while (0)
#define STAMP_TILE(k) do { if (tid == 0) stamps[(long long)gridDim.x * layers * 6 \
    + ((long long)b * layers + l) * PER_LAYER + (phase ? KA : 0) + (k)] = now_ns(); } while (0)
#else
#define STAMP(k) do { } while (0)
#define STAMP_TILE(k) do { } while (0)
#endif

#if WATCHDOG
// The probe's first runs: every spin gives up after 2 s, or at once after any block gave up,
// recording where its block waited (diag[32 + 4 b ..]: what, layer, phase, k-tile; diag[0] the
// kernel-wide flag), so a hang comes back as a place instead of taking the device call with it.
__device__ bool gave_up(unsigned* diag, unsigned long long start, unsigned what, int l,
                        int phase, int i) {
    if (*(volatile unsigned*)diag) return true;
    if (now_ns() - start < 2000000000ull) return false;
    unsigned* mine = diag + 32 + 4 * blockIdx.x;
    mine[0] = what; mine[1] = l; mine[2] = phase; mine[3] = i;
    atomicExch(diag, 1u);
    return true;
}
__device__ void wait_watched(unsigned bar, unsigned parity, unsigned* diag, unsigned what,
                             int l, int phase, int i) {
    const unsigned long long start = now_ns();
    while (!try_wait(bar, parity))
        if (gave_up(diag, start, what, l, phase, i)) return;
}
__GRID_SYNC_WATCHED__
#endif
#if WATCHDOG & 1
#define WAIT_AT(bar, parity, what, l, phase, i) wait_watched(bar, parity, diag, what, l, phase, i)
#else
#define WAIT_AT(bar, parity, what, l, phase, i) wait_phase(bar, parity)
#endif
#define WAIT(bar, parity, what, i) WAIT_AT(bar, parity, what, l, phase, i)
#if WATCHDOG & 2
#define GRID_SYNC_HERE() grid_sync_watched(bar, diag, l, phase)
#else
#define GRID_SYNC_HERE() grid_sync(bar)
#endif

// byte offset of element (r, c) of a 64-row matrix packed in 8 KB tiles of 64 columns, each in
// the no-swizzle core-matrix layout (LBO 128 along K, SBO 1024 down the rows)
__device__ __forceinline__ unsigned packed(int r, int c) {
    return (c >> 6) * TILE + (r >> 3) * 1024 + ((c & 63) >> 3) * 128 + (r & 7) * 16 + (c & 7) * 2;
}
__device__ __forceinline__ float bf16_float(unsigned bits) { return __uint_as_float(bits << 16); }
__device__ __forceinline__ float ld_cg_f32(const float* p) {
    float v;
    asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p));
    return v;
}
__device__ __forceinline__ uint2 ld_cg_u32x2(const void* p) {
    uint2 v;
    asm volatile("ld.global.cg.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    return v;
}
__device__ __forceinline__ float gelu_tanh(float x) {
    return 0.5f * x * (1.f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));
}

// Column tile n's 4 columns col.. of `row`, all K slices' partials summed in slice order: the
// gated residual out (bf16), the next layer's X * scale packed, -> the row's sum of squares there
__device__ __forceinline__ float finish_cols(const float* part, int n, int row, int col,
                                             const float* gate, const float* scale,
                                             const unsigned short* res_cur,
                                             unsigned short* res_nxt, unsigned char* xs_nxt,
                                             int l, const float* gate_pre = nullptr,
                                             const float* scale_pre = nullptr) {
    // the 4 columns' gate and scale: loaded ahead (EPI_PREFETCH) or read here
    const float* gl = EPI_PREFETCH ? gate_pre : gate + (long long)l * WIDTH + 64 * n + col;
    const float* sc = EPI_PREFETCH ? scale_pre : scale + (long long)(l + 1) * WIDTH + 64 * n + col;
    float4 v[SPLITS];
    #pragma unroll
    for (int k = 0; k < SPLITS; k++)
        v[k] = ld_cg4f(part + ((long long)k * NT_B + n) * 64 * 64 + row * 64 + col);
    float4 acc = v[0];
    #pragma unroll
    for (int k = 1; k < SPLITS; k++) {
        acc.x += v[k].x; acc.y += v[k].y; acc.z += v[k].z; acc.w += v[k].w;
    }
    const float sum[4] = {acc.x, acc.y, acc.z, acc.w};
    uint2 rb = ld_cg_u32x2(res_cur + (long long)row * WIDTH + 64 * n + col);
    const unsigned rin[4] = {rb.x & 0xFFFFu, rb.x >> 16, rb.y & 0xFFFFu, rb.y >> 16};
    unsigned yb[4], xb[4];
    float ss = 0.f;
    #pragma unroll
    for (int e = 0; e < 4; e++) {
        float y = bf16_float(rin[e]) + gl[e] * sum[e];
        yb[e] = row < VROWS ? bf16_bits(y) : 0u;
        const float yr = bf16_float(yb[e]);
        ss += yr * yr;
        xb[e] = bf16_bits(yr * sc[e]);
    }
    *(uint2*)(res_nxt + (long long)row * WIDTH + 64 * n + col) =
        make_uint2(yb[0] | (yb[1] << 16), yb[2] | (yb[3] << 16));
    *(uint2*)(xs_nxt + packed(row, 64 * n + col)) =
        make_uint2(xb[0] | (xb[1] << 16), xb[2] | (xb[3] << 16));
    return ss;
}

#if SPREAD || FLAGS
// the block counts in at `mine` (its stores ordered before by one thread, after the CTA
// barrier), then waits until `theirs` reaches `target` arrivals and acquires what was counted
// there, as last_to_arrive does for one block. The counters only grow within a launch (the
// kernel zeroes them at its end). `what`: the watchdog's name for the wait (4 a column tile's
// split-K partials, 6 a phase's output)
__device__ void signal_then_wait(int* mine, int* theirs, int target, unsigned what,
                                 unsigned* diag, int l, int phase) {
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("fence.acq_rel.gpu;" ::: "memory");
        atomicAdd(mine, 1);
#if WATCHDOG & 2
        const unsigned long long start = now_ns();
        while (*(volatile int*)theirs < target && !gave_up(diag, start, what, l, phase, 0)) { }
#else
        while (*(volatile int*)theirs < target) { }
#endif
        asm volatile("fence.acq_rel.gpu;" ::: "memory");
    }
    __syncthreads();
}
#endif

// W: per layer, per block, PER_LAYER tiles (KA of phase A, then KB of phase B)
// xs[2]: X * scale packed (the GEMM's A operand); res[2]: X, row-major bf16 (the residual)
// ssq[2]: per column tile, per row, the sum of squares of X's 64 columns there
// bias: per layer, per block, 64 floats (shift @ [Wg | Wu]^T in the block's column order)
// scale: per layer + 1, WIDTH floats; gate: per layer, WIDTH floats
extern "C" __global__ void __launch_bounds__(128 + 32 * WS, 1)
mlp_chain(const unsigned char* __restrict__ W, unsigned char* xs0, unsigned char* xs1,
          unsigned short* res0, unsigned short* res1, unsigned char* H, float* part, int* count,
          float* ssq, const float* __restrict__ bias, const float* __restrict__ scale,
          const float* __restrict__ gate, unsigned* bar, unsigned* diag,
          unsigned long long* stamps, int layers) {
    extern __shared__ __align__(1024) unsigned char smem[];
    __shared__ __align__(8) u64 wbars[NBUF];
    __shared__ __align__(8) u64 xbars[KA];
#if WS
    __shared__ __align__(8) u64 ebars[NBUF];  // slot consumed: one arrival per MMA warp
#endif
    unsigned char* sx = smem;             // KA activation tiles
    unsigned char* sw = smem + KA * TILE;  // the weight ring
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, b = blockIdx.x;
    const int total = layers * PER_LAYER;
    #define W_TILE(g) (W + ((long long)((g) / PER_LAYER) * (DIAG != 1) * gridDim.x * PER_LAYER \
                            + (long long)b * PER_LAYER + (g) % PER_LAYER) * TILE)
    #define FETCH(g) do { unsigned bar_ = smem_addr(&wbars[(g) % NBUF]); \
        expect_bytes(bar_, TILE); \
        bulk_copy_to(sw + ((g) % NBUF) * TILE, W_TILE(g), TILE, bar_); } while (0)
    if (tid == 0) {
        for (int i = 0; i < NBUF; i++)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_addr(&wbars[i])));
        for (int i = 0; i < KA; i++)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_addr(&xbars[i])));
#if WS
        for (int i = 0; i < NBUF; i++)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 4;" :: "r"(smem_addr(&ebars[i])));
#endif
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#if !WS
        for (int g = 0; g < NBUF - TPS && g < total; g++) FETCH(g);
#endif
    }
    ALL_SYNC();
#if CLUSTER > 1
    // no block may multicast into another before that one's mbarriers exist
    cluster_sync_all();
    const unsigned rank = cluster_rank();
#endif
#if WS
    if (warp == 4) {  // the producer: the block's whole weight stream, slot by slot
        if (lane == 0)
            for (int g = 0; g < total; g++) {
                if (g >= NBUF)  // the slot's previous tile, g - NBUF, is consumed
                    WAIT_AT(smem_addr(&ebars[g % NBUF]), (unsigned)(g / NBUF - 1) & 1u, 5u,
                            g / PER_LAYER, (g % PER_LAYER) >= KA, g % PER_LAYER);
                FETCH(g);
            }
        return;  // from here on the MMA warpgroup syncs on named barrier 1 alone
    }
#endif
    unsigned wph = 0, xph = 0;  // mbarrier phase parity, one bit per barrier
    int g = 0;  // this block's position in its weight stream
    const int n = b / SPLITS, s = b % SPLITS;  // phase B item: column tile, K slice
    for (int l = 0; l < layers; l++) {
        const int cur = l & 1;
        unsigned char* xs_cur = cur ? xs1 : xs0;
        unsigned char* xs_nxt = cur ? xs0 : xs1;
        const unsigned short* res_cur = cur ? res1 : res0;
        unsigned short* res_nxt = cur ? res0 : res1;
        for (int phase = 0; phase < 2; phase++) {
            STAMP(0);
            const int nk = phase ? KB : KA;
            const unsigned char* src = phase ? H + (long long)s * KB * TILE : xs_cur;
            if (tid == 0) {  // this phase's activation tiles, written by other blocks' stores
                asm volatile("fence.proxy.async.global;" ::: "memory");
                for (int i = 0; i < nk * (DIAG != 2); i++) {
                    unsigned xb = smem_addr(&xbars[i]);
                    expect_bytes(xb, XBYTES);  // its bytes may come from a peer's multicast
#if CLUSTER > 1
                    if (phase == 0) {
                        if (i % CLUSTER == rank)
                            bulk_multicast(sx + i * TILE, src + (long long)i * TILE, XBYTES, xb,
                                           (unsigned short)((1u << CLUSTER) - 1u));
                        continue;
                    }
#endif
                    bulk_copy_to(sx + i * TILE, src + (long long)i * TILE, XBYTES, xb);
                }
#if PREFETCH == 1
                PREFETCH_NEXT_PHASE();
#endif
            }
            // phase A's rows' 1 / rms (the rows' sums of squares are in since the barrier):
            // asked for before the MMAs so the loads' latency hides behind them
            float rstd[2] = {0.f, 0.f};
            if (phase == 0) {
                #pragma unroll
                for (int half = 0; half < 2; half++) {
                    const int row = 16 * warp + lane / 4 + 8 * half;
                    float sum = 0.f;
                    for (int t = 0; t < NT_B; t++)
                        sum += ld_cg_f32(ssq + ((long long)cur * NT_B + t) * 64 + row);
                    rstd[half] = rsqrtf(sum / WIDTH + __EPS__);
                }
            }
#if EPI_PREFETCH
            float pre[16];  // A: gate biases (j, e), then up biases; B: 4 gates, then 4 scales
            if (phase == 0) {
                const float* bl = bias + ((long long)l * gridDim.x + b) * 64;
                #pragma unroll
                for (int j = 0; j < 4; j++)
                    #pragma unroll
                    for (int e = 0; e < 2; e++) {
                        pre[2 * j + e] = bl[8 * j + 2 * (lane % 4) + e];
                        pre[8 + 2 * j + e] = bl[32 + 8 * j + 2 * (lane % 4) + e];
                    }
            } else {
                const int col = 64 * n + 4 * (tid & 15);  // finish_cols' columns
                #pragma unroll
                for (int e = 0; e < 4; e++) {
                    pre[e] = gate[(long long)l * WIDTH + col + e];
                    pre[4 + e] = scale[(long long)(l + 1) * WIDTH + col + e];
                }
            }
#endif
            // ACC accumulator sets, k-tile i into set i % ACC: the wgmma of one set need not
            // wait for the other's to finish (one set makes every wgmma wait for the last)
            float acc[ACC][32];
            #pragma unroll
            for (int a = 0; a < ACC; a++)
                #pragma unroll
                for (int r = 0; r < 32; r++) acc[a][r] = 0.f;
            float* d = acc[0];
            for (int i = 0; i < nk; i += TPS, g += TPS) {
                #pragma unroll
                for (int j = 0; j < TPS; j++) {
                    const int buf = (g + j) % NBUF;
                    WAIT(smem_addr(&wbars[buf]), (wph >> buf) & 1u, 1u, i + j);
                    wph ^= 1u << buf;
                    if (DIAG != 2)
                        WAIT(smem_addr(&xbars[i + j]), (xph >> (i + j)) & 1u, 2u, i + j);
                    xph ^= 1u << (i + j);
                    STAMP_TILE(i + j);
                }
                #pragma unroll
                for (int j = 0; j < TPS; j++)
                    if (DIAG != 3)
                        mma_tile(acc[j % ACC], sx + (i + j) * TILE, sw + ((g + j) % NBUF) * TILE);
                // the previous step's MMAs are done (this step's TPS groups may run on)
                asm volatile("wgmma.wait_group.sync.aligned __TPS__;" ::: "memory");
#if WS
                if (lane == 0 && i > 0)  // so its slots go back to the producer
                    for (int j = 0; j < TPS; j++) ARRIVE(ebars[(g - TPS + j) % NBUF]);
#else
                CTA_SYNC();  // so the previous step's slots are free: refill them
                if (tid == 0)
                    for (int j = 0; j < TPS; j++)
                        if (g + NBUF - TPS + j < total) FETCH(g + NBUF - TPS + j);
#endif
            }
            asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#if WS
            if (lane == 0)  // the phase's last step's slots
                for (int j = 0; j < TPS; j++) ARRIVE(ebars[(g - TPS + j) % NBUF]);
#endif
            #pragma unroll
            for (int a = 1; a < ACC; a++)
                #pragma unroll
                for (int r = 0; r < 32; r++) d[r] += acc[a][r];
            STAMP(1);
#if PREFETCH == 2
            if (tid == 0) PREFETCH_NEXT_PHASE();
#endif
            if (phase == 0) {
                // H[:, 32 b + c] = gelu(G) * U, G and U = rstd * acc + bias (columns c, c + 32)
                const float* bl = bias + ((long long)l * gridDim.x + b) * 64;
                #pragma unroll
                for (int half = 0; half < 2; half++) {
                    const int row = 16 * warp + lane / 4 + 8 * half;
                    #pragma unroll
                    for (int j = 0; j < 4; j++) {
                        const int c = 8 * j + 2 * (lane % 4);
                        float h[2];
                        #pragma unroll
                        for (int e = 0; e < 2; e++) {
#if EPI_PREFETCH
                            float gv = rstd[half] * d[4 * j + 2 * half + e] + pre[2 * j + e];
                            float uv = rstd[half] * d[4 * (j + 4) + 2 * half + e]
                                + pre[8 + 2 * j + e];
#else
                            float gv = rstd[half] * d[4 * j + 2 * half + e] + bl[c + e];
                            float uv = rstd[half] * d[4 * (j + 4) + 2 * half + e] + bl[32 + c + e];
#endif
                            h[e] = row < VROWS ? gelu_tanh(gv) * uv : 0.f;
                        }
                        *(unsigned*)(H + packed(row, 32 * b + c)) =
                            bf16_bits(h[0]) | (bf16_bits(h[1]) << 16);
                    }
                }
            } else {
                // this K slice's partial tile, then the tile's sum (in K-slice order)
                float* mine = part + ((long long)s * NT_B + n) * 64 * 64;
                #pragma unroll
                for (int r = 0; r < 32; r += 2) {
                    const int row = 16 * warp + lane / 4 + 8 * ((r % 4) / 2);
                    const int col = 8 * (r / 4) + 2 * (lane % 4);
                    *(float2*)(mine + row * 64 + col) = make_float2(d[r], d[r + 1]);
                }
#if SPREAD
                // every slice's block waits for the tile's 8 partials, then sums 8 of its rows
                signal_then_wait(count + n, count + n, SPLITS * (l + 1), 4u, diag, l, 1);
                const int row = 8 * s + (tid >> 4), col = 4 * (tid & 15);
#if EPI_PREFETCH
                float ss = finish_cols(part, n, row, col, gate, scale, res_cur, res_nxt, xs_nxt,
                                       l, pre, pre + 4);
#else
                float ss = finish_cols(part, n, row, col, gate, scale, res_cur, res_nxt, xs_nxt,
                                       l);
#endif
                #pragma unroll
                for (int o = 8; o > 0; o >>= 1) ss += __shfl_xor_sync(0xFFFFFFFFu, ss, o);
                if ((tid & 15) == 0) ssq[((long long)(cur ^ 1) * NT_B + n) * 64 + row] = ss;
#else
                // the tile's last slice to arrive sums all 64 rows
                if (last_to_arrive(count + n, SPLITS)) {
                    const int row = tid >> 1, c0 = (tid & 1) * 32;
                    float ss = 0.f;
                    #pragma unroll
                    for (int q = 0; q < 8; q++)
                        ss += finish_cols(part, n, row, c0 + 4 * q, gate, scale, res_cur,
                                          res_nxt, xs_nxt, l);
                    ss += __shfl_xor_sync(0xFFFFFFFFu, ss, 1);
                    if ((tid & 1) == 0) ssq[((long long)(cur ^ 1) * NT_B + n) * 64 + row] = ss;
                    if (tid == 0) count[n] = 0;
                }
#endif
            }
            // this phase's stores are read by the next one's bulk copies (the async proxy)
            STAMP(2);
            asm volatile("fence.proxy.async.global;" ::: "memory");
#if FLAGS
            if (phase == 0)  // this block's H columns are in slice b / A_PER_SLICE
                signal_then_wait(FLAG(b / A_PER_SLICE), FLAG(s), A_PER_SLICE * (l + 1), 6u,
                                 diag, l, phase);
            else if (l < layers - 1)
                signal_then_wait(FLAG(SPLITS), FLAG(SPLITS), gridDim.x * (l + 1), 6u, diag,
                                 l, phase);
            else
                GRID_SYNC_HERE();
#else
            GRID_SYNC_HERE();
#endif
        }
    }
#if SPREAD
    if (b == 0 && tid < NT_B) count[tid] = 0;  // everyone is past its last tile counter wait
#endif
#if FLAGS
    if (b == 0 && tid <= SPLITS) *FLAG(tid) = 0;  // everyone is past its last counter wait
#endif
}
'''


WATCH_WAITS, WATCH_GRID = 1, 2  # the spins a watchdog form watches (bits)
WATCH_ALL = WATCH_WAITS | WATCH_GRID


@dataclass(frozen=True)
class Form:
    """One form of the kernel, as compiled and timed."""
    ring: int = 8  # weight tiles in flight per block (shared memory: 16 activation tiles + ring)
    spread: bool = True  # phase B's split-K sum by all of the tile's 8 blocks, else its last
    prefetch: int = 0  # the next phase's weights into L2: 1 as a phase starts, 2 after its MMAs
    tps: int = 1  # weight tiles per MMA-loop step
    diagnostic: int = 0  # DIAGNOSTICS: time only, the numbers wrong by design
    ws: bool = False  # warp-specialized: a producer warp refills the ring (160 threads)
    acc: int = 1  # accumulator sets the k-tiles alternate between (independent wgmma chains)
    flags: bool = False  # counters in place of the grid barriers (per K slice after phase A)
    cluster: int = 1  # blocks per cluster, phase A's X multicast to them (read once per cluster)
    trim: bool = False  # activation copies only as far as the real rows' row groups go
    epi_prefetch: bool = False  # the epilogues' constants loaded as the phase starts

    @property
    def threads(self) -> int:
        return 128 + 32 * self.ws

    @property
    def shared(self) -> int:
        return (KA + self.ring) * TILE

    @property
    def name(self) -> str:
        return ', '.join([f'ring {self.ring}', 'spread sum' if self.spread else 'last-block sum']
                         + [['', 'L2 prefetch', 'L2 prefetch after the MMAs'][self.prefetch]]
                         * bool(self.prefetch)
                         + [f'{self.tps} tile{"s" * (self.tps > 1)} a step']
                         + ['producer warp'] * self.ws
                         + [f'{self.acc} accumulator sets'] * (self.acc > 1)
                         + ['counters for barriers'] * self.flags
                         + [f'X multicast to clusters of {self.cluster}'] * (self.cluster > 1)
                         + ['activation tiles trimmed to the real rows'] * self.trim
                         + ['epilogue constants loaded early'] * self.epi_prefetch
                         + [DIAGNOSTICS.get(self.diagnostic, '')] * bool(self.diagnostic))


DIAGNOSTICS = {1: 'DIAGNOSTIC weights hot in L2', 2: 'DIAGNOSTIC no activation copies',
               3: 'DIAGNOSTIC no MMAs'}
# timed side by side: the first as it ran first, then one change at a time, then together, then
# the best with each stream taken away (where its time goes)
FORMS = (Form(spread=False), Form(), Form(ring=4), Form(prefetch=1), Form(tps=2),
         Form(tps=4), Form(prefetch=1, tps=2), Form(ring=12, prefetch=1, tps=2),
         Form(prefetch=2, tps=2), Form(ring=12, prefetch=2, tps=2),
         Form(tps=2, diagnostic=1), Form(tps=2, diagnostic=2), Form(tps=2, diagnostic=3),
         Form(ws=True), Form(ws=True, tps=2), Form(ring=12, ws=True, tps=2),
         Form(tps=2, acc=2), Form(tps=4, acc=2), Form(tps=4, acc=4), Form(ws=True, tps=2, acc=2),
         Form(ring=12, ws=True, tps=4, acc=4), Form(tps=2, flags=True),
         Form(tps=2, acc=2, flags=True), Form(tps=2, acc=2, flags=True, cluster=2),
         Form(tps=2, acc=2, flags=True, cluster=4), Form(tps=2, acc=2, cluster=2),
         Form(tps=2, flags=True, trim=True), Form(tps=2, acc=2, flags=True, trim=True),
         Form(tps=2, acc=2, flags=True, epi_prefetch=True))
TIMELINES = (Form(tps=2), Form(tps=2, diagnostic=1), Form(tps=2, diagnostic=2),
             Form(tps=2, diagnostic=3), Form(ws=True, tps=2), Form(prefetch=2, tps=2),
             Form(tps=2, flags=True), Form(tps=2, acc=2, flags=True, cluster=2),
             Form(tps=2, acc=2, flags=True, trim=True),
             Form(tps=2, acc=2, flags=True, epi_prefetch=True))


def chosen(forms: tuple, variable: str) -> list:
    """(index, form) of `forms` named by the environment variable (comma-separated indices,
    e.g. MLP_CHAIN_FORMS=16,22: a short device call), or all of them."""
    picked = os.environ.get(variable, '')
    indices = [int(i) for i in picked.split(',') if i.strip()] if picked else range(len(forms))
    return [(i, forms[i]) for i in indices]


def grid_sync_watched() -> str:
    """hopper_ptx's grid barrier whose spin gives up (the watchdog's), as `grid_sync_watched`."""
    text = GRID_SYNC.replace('void grid_sync(unsigned* bar)', 'void grid_sync_watched(unsigned* '
                             'bar, unsigned* diag, int l, int phase)')
    text = text.replace('while (*gen == mine) { }', 'const unsigned long long start = now_ns();\n'
                        '            while (*gen == mine\n'
                        '                   && !gave_up(diag, start, 3u, l, phase, 0)) { }')
    assert 'grid_sync_watched' in text and 'gave_up' in text, 'GRID_SYNC changed its form'
    return text


def source(form: Form, watchdog: int = 0, stamps: bool = False) -> str:
    """The CUDA source of `mlp_chain` in `form`; `watchdog` (bits WATCH_WAITS, WATCH_GRID):
    those spins give up after 2 s and record where (for first runs; the timed form has none);
    `stamps`: it records a timeline (Chain.timeline)."""
    if form.ring < 2 * form.tps or KB % form.tps:
        raise ValueError(f'{form.name}: the ring must hold two steps, a phase whole steps')
    if form.tps % form.acc:
        raise ValueError(f'{form.name}: a step must cover every accumulator set alike')
    if form.epi_prefetch and not form.spread:
        raise ValueError(f'{form.name}: the early epilogue constants are the spread sum\'s')
    if form.cluster not in (1, 2, 4, 8) or KA % form.cluster:
        raise ValueError(f'{form.name}: clusters of 1, 2, 4 or 8 blocks, dividing phase A\'s '
                         f'{KA} activation tiles')
    values = {'NBUF': form.ring, 'KA': KA, 'KB': KB, 'NT_B': NT_B, 'SPLITS': SPLITS,
              'WIDTH': WIDTH, 'ROWS': ROWS, 'EPS': f'{EPS:.1e}f', 'WATCHDOG': watchdog,
              'STAMPS': int(stamps), 'SPREAD': int(form.spread), 'PREFETCH': form.prefetch,
              'TPS': form.tps, 'DIAG': form.diagnostic, 'WS': int(form.ws),
              'ACC': form.acc, 'FLAGS': int(form.flags), 'A_PER_SLICE': A_PER_SLICE,
              'FLAG_STRIDE': FLAG_STRIDE, 'CLUSTER': form.cluster, 'TRIM': int(form.trim),
              'EPI_PREFETCH': int(form.epi_prefetch),
              'GRID_SYNC_WATCHED': grid_sync_watched(),
              'MMA_TILE': mma_tile_source(64)}
    text = SOURCE
    for key, value in values.items():
        text = text.replace(f'__{key}__', str(value))
    # every CTA-wide wait, the shared helpers' too: with a producer warp they must leave it out
    text = text.replace('__syncthreads();', 'CTA_SYNC();')
    return text


def make_layers(layers: int, device: str, seed: int = 0) -> list:
    """Random weights and time conditioning of `layers` MLP halves, at the expert's scales."""
    g = torch.Generator(device='cpu').manual_seed(seed)

    def randn(*shape, std=1.0):
        return (torch.randn(*shape, generator=g) * std).to(device)
    return [{'wg': randn(MLP, WIDTH, std=WIDTH ** -0.5).to(torch.bfloat16),
             'wu': randn(MLP, WIDTH, std=WIDTH ** -0.5).to(torch.bfloat16),
             'wd': randn(WIDTH, MLP, std=MLP ** -0.5).to(torch.bfloat16),
             'scale': 1 + 0.1 * randn(WIDTH), 'shift': 0.1 * randn(WIDTH),
             'gate': 0.5 + 0.1 * randn(WIDTH)} for _ in range(layers)]


def block_rows(layer: dict, b: int) -> torch.Tensor:
    """Phase A weight rows of block b: 32 gate rows, then the matching 32 up rows."""
    return torch.cat([layer['wg'][32 * b:32 * b + 32], layer['wu'][32 * b:32 * b + 32]])


def pack_weights(layers: list) -> torch.Tensor:
    """Every block's weight stream, in the kernel's order: per layer, per block, its KA phase A
    tiles then its KB phase B tiles (columns 64 n.. of Wd over K slice s, for b = n SPLITS + s)."""
    out = []
    for layer in layers:
        for b in range(BLOCKS):
            n, s = divmod(b, SPLITS)
            out.append(pack_tiles(block_rows(layer, b)))
            wd = layer['wd'][64 * n:64 * n + 64, s * KB * 64:(s + 1) * KB * 64]
            out.append(pack_tiles(wd.contiguous()))
    return torch.cat(out)


def host_inputs(x0: torch.Tensor, layers: list) -> dict:
    """What the kernel reads besides the weights: layer 0's activations in both forms, the
    rows' sums of squares per column tile, and the conditioning in the kernel's layouts."""
    dev = x0.device
    x = torch.zeros(PAD, WIDTH, dtype=torch.bfloat16, device=dev)
    x[:ROWS] = x0
    scales = torch.stack([la['scale'] for la in layers] + [torch.ones(WIDTH, device=dev)])
    bias = torch.stack([torch.stack([layer['shift'] @ block_rows(layer, b).float().t()
                                     for b in range(BLOCKS)]) for layer in layers])
    ssq = torch.zeros(2, NT_B, 64, device=dev)
    ssq[0] = (x.float() ** 2).reshape(PAD, NT_B, 64).sum(-1).t()
    return {'xs0': pack_tiles((x.float() * scales[0]).to(torch.bfloat16)),
            'res0': x.contiguous(), 'ssq': ssq, 'bias': bias.contiguous(),
            'scale': scales.contiguous(),
            'gate': torch.stack([la['gate'] for la in layers]).contiguous()}


def reference(x0: torch.Tensor, layers: list) -> torch.Tensor:
    """The MLP halves in float32 with the kernel's bf16 roundings (H, X; X * scale)."""
    x = x0.to(torch.bfloat16)
    for layer in layers:
        xf = x.float()
        rstd = torch.rsqrt((xf ** 2).mean(-1, keepdim=True) + EPS)
        xs = (xf * layer['scale']).to(torch.bfloat16).float()
        gate_up = rstd * (xs @ torch.cat([layer['wg'], layer['wu']]).float().t())
        gate_up = gate_up + layer['shift'] @ torch.cat([layer['wg'], layer['wu']]).float().t()
        g, u = gate_up.split(MLP, dim=-1)
        h = (torch.nn.functional.gelu(g, approximate='tanh') * u).to(torch.bfloat16)
        x = (xf + layer['gate'] * (h.float() @ layer['wd'].float().t())).to(torch.bfloat16)
    return x


def torch_ops(x0: torch.Tensor, layers: list):
    """The same MLP halves as separate torch ops (what a CUDA graph of kernels does today)."""
    from torch.nn import functional as F
    fused = [torch.cat([la['wg'], la['wu']]) for la in layers]

    def run():
        x = x0
        for layer, w in zip(layers, fused):
            xn = F.rms_norm(x, (WIDTH,), eps=EPS) * layer['scale'] + layer['shift']
            g, u = F.linear(xn.to(torch.bfloat16), w).split(MLP, dim=-1)
            h = F.gelu(g, approximate='tanh') * u
            x = x + layer['gate'] * F.linear(h, layer['wd'])
            x = x.to(torch.bfloat16)
        return x
    return run


def setup(state: dict) -> dict:
    """The weights, inputs and reference on the GPU, into `state` -> the run's shape."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    if sms < BLOCKS:  # every block must be resident for the grid-wide barrier
        raise RuntimeError(f'{BLOCKS} blocks need as many SMs; this GPU has {sms}')
    layers = make_layers(LAYERS, 'cuda')
    x0 = torch.randn(ROWS, WIDTH, generator=torch.Generator().manual_seed(1))
    x0 = x0.to('cuda').to(torch.bfloat16)
    state.update(layers=layers, x0=x0, want=reference(x0, layers).float(),
                 weights=pack_weights(layers), inputs=host_inputs(x0, layers))
    return {'sms': sms, 'layers': LAYERS, 'blocks': BLOCKS,
            'weight_mb_per_layer': round(3 * MLP * WIDTH * 2 / 1e6, 1),
            'bound_us_per_layer_at_4.3TBps': round(3 * MLP * WIDTH * 2 / 4.3e12 * 1e6, 2)}


def torch_ops_section(state: dict) -> dict:
    """The same MLP halves as torch ops, timed replayed from one CUDA graph."""
    from lamp_ros.kernels import tuning
    run = torch_ops(state['x0'], state['layers'])
    got = run()
    return {'us_per_layer': round(tuning.gpu_time_ms(run) * 1e3 / LAYERS, 2),
            'rel_error': float((got.float() - state['want']).norm() / state['want'].norm())}


WAITS = {1: 'weight tile', 2: 'activation tile', 3: 'grid barrier', 4: 'tile counter',
         5: 'producer: empty slot', 6: 'phase counter'}


class Chain:
    """mlp_chain compiled in one form, with its work buffers."""

    def __init__(self, state: dict, form: Form, watchdog: int = 0, stamps: bool = False,
                 cooperative: bool = True):
        if form.cluster > 1 and not cooperative:  # a plain launch makes no clusters
            raise ValueError(f'{form.name}: clusters need the cooperative cluster launch')
        self.state, self.form, self.cooperative = state, form, cooperative
        self.kernel = torch.cuda._compile_kernel(source(form, watchdog, stamps), 'mlp_chain',
                                                 compute_capability='90a')
        self.kernel.set_shared_memory_config(form.shared)
        inputs = state['inputs']
        self.xs = [inputs['xs0'].clone(), torch.zeros_like(inputs['xs0'])]
        self.res = [inputs['res0'].clone(), torch.zeros_like(inputs['res0'])]
        self.ssq = inputs['ssq'].clone()
        self.h = torch.zeros(PAD * MLP * 2, dtype=torch.uint8, device='cuda')
        self.part = torch.zeros(SPLITS * NT_B * 64 * 64, device='cuda')
        # the split-K tile counters, then (flags forms) one line per K slice and one for phase B
        self.count = torch.zeros(FLAG_STRIDE * (SPLITS + 2), dtype=torch.int32, device='cuda')
        self.bar = torch.zeros(64, dtype=torch.int32, device='cuda')
        self.diag = torch.zeros(32 + 4 * BLOCKS, dtype=torch.int32, device='cuda')
        self.stamps = torch.zeros(BLOCKS * LAYERS * (2 * 3 + TILES_PER_LAYER), dtype=torch.int64,
                                  device='cuda')

    def launch(self, layers: int = LAYERS, fresh: bool = True) -> torch.Tensor:
        """Run `layers` MLP halves -> the output buffer (layer l writes res[(l + 1) % 2]).
        fresh: from layer 0's inputs; else on from where the last run ended (the buffers then
        hold a later layer's state, as consistent as layer 0's)."""
        inputs = self.state['inputs']
        if fresh:
            self.xs[0].copy_(inputs['xs0'])
            self.res[0].copy_(inputs['res0'])
            self.ssq.copy_(inputs['ssq'])
        args = [self.state['weights'], self.xs[0], self.xs[1], self.res[0], self.res[1],
                self.h, self.part, self.count, self.ssq, inputs['bias'], inputs['scale'],
                inputs['gate'], self.bar, self.diag, self.stamps, layers]
        if self.cooperative:
            launch_cooperative(self.kernel, (BLOCKS, 1, 1), (self.form.threads, 1, 1), args,
                               self.form.shared, cluster=self.form.cluster)
        else:
            self.kernel(grid=(BLOCKS, 1, 1), block=(self.form.threads, 1, 1),
                        shared_mem=self.form.shared, args=args)
        return self.res[layers % 2]

    def stalls(self) -> list:
        """Where the blocks of a watchdog run gave up waiting, grouped: [] when none did."""
        diag = self.diag.cpu().tolist()
        if not diag[0]:
            return []
        places = {}
        for b in range(BLOCKS):
            what, layer, phase, tile = diag[32 + 4 * b:36 + 4 * b]
            if what:
                key = f'{WAITS.get(what, what)}: layer {layer} phase {"AB"[phase]} k-tile {tile}'
                places.setdefault(key, []).append(b)
        return [{'where': key, 'blocks': len(blocks), 'first_blocks': blocks[:8]}
                for key, blocks in places.items()]

    def timeline(self, layers: int = LAYERS) -> dict:
        """After a launch of a `stamps` form: where a layer's time goes, as medians over blocks
        and layers in us (phase A and B: waiting for tiles + MMAs, the epilogue, the grid
        barrier after it), and the trace events of every block (Chrome / Perfetto JSON)."""
        every = self.stamps.cpu().double() / 1e3
        phases = BLOCKS * LAYERS * 6
        t = every[:phases].view(BLOCKS, LAYERS, 2, 3)[:, :layers]
        tiles = every[phases:].view(BLOCKS, LAYERS, TILES_PER_LAYER)[:, :layers]
        origin = t.min()
        t, tiles = t - origin, tiles - origin
        ends = torch.cat([t[:, :, 1:, 0], torch.cat([t[:, 1:, :1, 0], t[:, -1:, 1:, 2]], 1)], 2)
        parts = {'mma': t[..., 1] - t[..., 0], 'epilogue': t[..., 2] - t[..., 1],
                 'barrier': ends - t[..., 2]}
        summary = {f'{name} {"AB"[ph]} us': round(float(v[:, :layers - 1, ph].median()), 2)
                   for ph in (0, 1) for name, v in parts.items()}
        summary['layer us (block 0)'] = round(float((t[0, -1, 0, 0] - t[0, 0, 0, 0])
                                                    / max(layers - 1, 1)), 2)
        # when each k-tile could start, from its phase's start (medians): a steady slope is
        # the loop or the stream, a late first tile the activations' copy
        since = torch.cat([tiles[..., :KA] - t[..., :1, 0], tiles[..., KA:] - t[..., 1:, 0]], -1)
        ready = since[:, :max(layers - 1, 1)].reshape(-1, TILES_PER_LAYER).median(0).values
        summary['k-tile ready us, phase A'] = [round(float(v), 2) for v in ready[:KA]]
        summary['k-tile ready us, phase B'] = [round(float(v), 2) for v in ready[KA:]]
        names = [{'name': 'thread_name', 'ph': 'M', 'pid': 0, 'tid': b,
                  'args': {'name': f'block {b}'}} for b in range(BLOCKS)]
        events = [{'name': f'{name} {"AB"[ph]}', 'cat': 'gpu', 'ph': 'X', 'pid': 0, 'tid': b,
                   'ts': round(float(t[b, lay, ph, k]), 3), 'dur': round(float(v[b, lay, ph]), 3),
                   'args': {'layer': lay}}
                  for b in range(BLOCKS) for lay in range(layers) for ph in (0, 1)
                  for k, (name, v) in enumerate(parts.items())]
        return {'summary': summary, 'trace': {'traceEvents': names + events}}


def error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got[:ROWS].float() - want).norm() / want.norm())


def watchdog_section(state: dict) -> dict:
    """Every timed form with the watchdog on, 1 layer then all: where it stalls, if it does,
    or its error. The timed sections run only when none stalled."""
    out = {}
    for _, form in chosen(FORMS, 'MLP_CHAIN_FORMS'):
        try:
            chain = Chain(state, form, watchdog=WATCH_ALL)
            chain.launch(1)
            torch.cuda.synchronize()
        except RuntimeError as exc:  # refused (e.g. clusters that cannot all be resident):
            out[form.name] = f'failed: {exc}'  # its timed section says so again; go on
            print('watchdog', form.name, out[form.name], flush=True)
            continue
        for layers in (1, LAYERS):
            got = chain.launch(layers)
            torch.cuda.synchronize()
            stalls = chain.stalls()
            key = f'{form.name}, {layers} layers'
            if stalls or form.diagnostic:
                out[key] = {'stalls': stalls}
            else:
                want = state['want'] if layers == LAYERS else \
                    reference(state['x0'], state['layers'][:layers]).float()
                out[key] = {'rel_error': error(got, want)}
            print('watchdog', key, out[key], flush=True)
            if stalls:
                state['stalled'] = True
                break
    return out


def chain_section(state: dict, form: Form) -> dict:
    """mlp_chain in `form`: error, padding, determinism, time."""
    from lamp_ros.kernels import tuning
    if state.get('stalled'):
        raise RuntimeError('not run: a watchdog run stalled (see its section)')
    chain = Chain(state, form)
    first = chain.launch().clone()
    torch.cuda.synchronize()
    again = chain.launch()
    torch.cuda.synchronize()
    if form.diagnostic:
        row = {'numbers': 'wrong by design (a diagnostic form: time only)',
               'shared_bytes': form.shared}
    else:
        row = {'rel_error': error(first, state['want']),
               'padding_rows_zero': bool((first[ROWS:] == 0).all()),
               'deterministic': bool(torch.equal(first, again)), 'shared_bytes': form.shared}
    us = tuning.gpu_time_ms(lambda: chain.launch(fresh=False)) * 1e3 / LAYERS
    row.update(us_per_layer=round(us, 2), TBps=round(3 * MLP * WIDTH * 2 / (us * 1e-6) / 1e12, 2))
    print(form.name, row, flush=True)
    return row


def timeline_section(state: dict, form: Form, trace: str, **chain_options) -> dict:
    """Where a layer's time goes in one launch of `form` with stamps (medians over blocks and
    layers, us); every block's timeline is written to `trace` (Chrome / Perfetto JSON).
    chain_options: Chain's watchdog and cooperative."""
    if state.get('stalled'):
        raise RuntimeError('not run: a watchdog run stalled (see its section)')
    chain = Chain(state, form, stamps=True, **chain_options)
    chain.launch()
    chain.launch()
    torch.cuda.synchronize()
    timeline = chain.timeline()
    with open(trace, 'w', encoding='utf-8') as f:
        json.dump(timeline['trace'], f)
    return {**timeline['summary'], 'trace': os.path.basename(trace)}


STEPS = ('mma A', 'epilogue A', 'barrier A', 'mma B', 'epilogue B', 'barrier B')


def write_png(report: dict, path: str) -> None:
    """The report as a picture: us per layer of every form beside the torch-ops baseline,
    where a layer's time goes in the forms with a timeline, and when each k-tile could start."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    timed = {k[len('mlp_chain '):]: v['us_per_layer'] for k, v in report.items()
             if k.startswith('mlp_chain ') and isinstance(v, dict)}
    base = report.get('torch ops, one CUDA graph', {})
    if isinstance(base, dict) and 'us_per_layer' in base:
        timed = {'torch ops, one CUDA graph': base['us_per_layer'], **timed}
    lines = {k[len('timeline '):]: v for k, v in report.items()
             if k.startswith('timeline ') and isinstance(v, dict)}
    fig, (left, mid, right) = plt.subplots(1, 3, figsize=(18, 4.8),
                                           gridspec_kw={'width_ratios': [1.2, 1, 1]})
    left.barh(range(len(timed)), list(timed.values()), color='tab:blue')
    left.set_yticks(range(len(timed)), list(timed), fontsize=7)
    left.invert_yaxis()
    for i, us in enumerate(timed.values()):
        left.text(us, i, f' {us:.1f}', va='center', fontsize=7)
    bound = report.get('shape', {}).get('bound_us_per_layer_at_4.3TBps')
    if bound:
        left.axvline(bound, color='k', ls=':', lw=1)
        left.text(bound, len(timed) - 0.5, ' weight-read bound', fontsize=7)
    left.set_xlabel('us per layer (MLP half, 18 layers, CUDA graph)')
    colors = plt.get_cmap('tab20')
    for i, (name, line) in enumerate(lines.items()):
        start = 0.0
        for j, step in enumerate(STEPS):
            width = line[f'{step} us']
            mid.barh(i, width, left=start, color=colors(j), label=step if i == 0 else None)
            start += width
    mid.set_yticks(range(len(lines)), [f'{i}: {name}' for i, name in enumerate(lines)],
                   fontsize=7)
    mid.invert_yaxis()
    mid.set_xlabel('us per layer, medians over blocks (globaltimer stamps)')
    mid.legend(fontsize=7, ncol=3, loc='lower center', bbox_to_anchor=(0.5, 1.0))
    for i, line in enumerate(lines.values()):
        for phase, style in (('A', 'o-'), ('B', 's--')):
            ready = line[f'k-tile ready us, phase {phase}']
            right.plot(range(len(ready)), ready, style, ms=3, color=colors(2 * i),
                       label=f'{i}: phase {phase}')
    right.set_xlabel('k-tile')
    right.set_ylabel('us from the phase start to both tiles in')
    right.set_title('when each k-tile could start (forms numbered as left)', fontsize=8)
    right.legend(fontsize=7, ncol=2)
    fig.suptitle(f'mlp_chain on {report.get("gpu", "?")}')
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def main():
    state = {}
    sections = [('shape', lambda: setup(state)),
                ('torch ops, one CUDA graph', lambda: torch_ops_section(state)),
                ('watchdog', lambda: watchdog_section(state))]
    sections += [(f'mlp_chain {form.name}', lambda form=form: chain_section(state, form))
                 for _, form in chosen(FORMS, 'MLP_CHAIN_FORMS')]
    trace_dir = os.environ.get('OUT', '.')  # the device call's results folder, where there is one
    sections += [(f'timeline {form.name}', lambda form=form, i=i: timeline_section(
        state, form, os.path.join(trace_dir, f'mlp_chain_timeline_{i}.json')))
        for i, form in chosen(TIMELINES, 'MLP_CHAIN_TIMELINES')]
    report = run_sections(__doc__.splitlines()[0], 'mlp_chain_probe.json', sections)
    print(json.dumps(report, indent=1))
    try:  # the device image may lack matplotlib: the picture is then drawn from the JSON later
        write_png(report, os.path.join(trace_dir, 'mlp_chain_probe.png'))
    except ImportError as exc:
        print(f'no picture: {exc}; write_png(report, path) draws it where matplotlib is')


if __name__ == '__main__':
    main()
