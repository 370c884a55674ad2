"""The expert's attention as one CUDA kernel whose key splits meet in a thread-block cluster: a
probe toward the persistent expert's attention half ("an attention part under 5 us").

Today the expert attention is two Triton kernels, `_mqa_kernel` (225 programs of 16 query rows x
128 keys, 10.8 us a call in the graph) and `_mqa_combine_kernel` (3.0 us), against a bound of
about 1 us (1 MB of K/V, 0.4 GFLOP). Nsight Compute put the first at 2,250 instructions a warp,
one issued every 7.7 cycles: the time is a warp's serial chain (shared-memory layout changes and
cross-warp reductions for 16-row dots), and the second kernel exists only to merge the key
splits' partial softmax sums through global memory.

`mqa_cluster` (CUDA C++, built by NVRTC) does the same work as one launch:

- a block holds 16 query rows (token, head) per warp, the rows of 2 tokens' 8 heads; every
  global read of the block goes out at once as cp.async copies into shared memory (q, the
  cos / sin rows of its tokens, its first two 64-key chunks of K and V), and q and the action
  tokens' own K are then rotated (RoPE) in place, q scaled into log2 units and rounded to bf16
  as the Triton kernel does it;
- the CL blocks of a cluster split the keys (prefix keys, then the action tokens' own keys, one
  index space); each runs its 64-key chunks through a ring of two buffers with mma.sync
  m16n8k16 bf16 dots on ldmatrix fragments (V through ldmatrix.trans) and the online softmax
  in registers (the eager code's finite fill for masked keys, keys past the end excluded);
- the splits' (max, sum, output) meet in distributed shared memory: every block rescales its
  partial output by its share of the row's softmax sum, then sums one column slice of every
  block's partial into the bf16 output. No combine kernel, no partials in global memory.

Timed per layer on 18 layers' distinct K/V and qkv as a chain of 18 attention calls in one CUDA
graph, beside the Triton pair as the H200 build tiles it, with K/V strided as the artifact reads
them (views into the prefix's qkv output, rows 5 KB apart) and contiguous, and checked against
`ops.mqa_attention_reference` (max error / max |reference|), with contiguous and with strided K/V
(the artifact reads the prefix's K/V where its qkv GEMM left them). The forms with 4 warps and
clusters of 8 or 16 also run once with %globaltimer stamps at each phase's end (STAMP_NAMES).

Measured on the H200 (2026-12-01, bench/results/attention_cluster_probe_h200.json; Nsight
Compute of the 4-warp, cluster-8 form in ncu_mqa_cluster_h200.txt): every form computes the
reference's numbers (the same max error as the Triton pair, 6.2e-3 contiguous, 7.0e-3 strided),
and every form is slower: per layer with strided K/V 18.6 us (4 warps, clusters of 16: one
chunk a block), 19.7 (4 warps, 8), 22.5 (2 warps, 8), 28.5 and 33.6 (clusters of 4), against
14.0 for the Triton pair (18.4-19.8 and 13.9-14.0 in the three runs before). Contiguous K/V save
0.0-0.8 us a call (the Triton pair 13.6 against 14.0: 0.07 ms over an inference's 180 calls,
about what copying the prefix's 18 K/V pairs would cost, so the artifact keeps reading them
where they are). Where a block's ~19 us go (the stamps, cluster 8;
medians): issuing its copies 4.6 us (q 32 KB, cos / sin 8-50 KB and two chunks of 64 KB:
170-210 KB a block, and a copy's issue stalls while too many are in flight), the first chunk's
arrival and the rotations 3.1 more (about 25 GB/s into each SM, 1.4 TB/s over the 56 busy
SMs), each chunk's dots and softmax about 2 (mma.sync), the partials written 1.0-1.3, the
column sums through distributed shared memory 2.3 (3.6-4.1 with clusters of 16), and the
three cluster barriers 0.3-0.5 us each (with the skew between splits, the first 0.5-1.8).
Nsight Compute: 251 registers, one warp per scheduler, an instruction issued every 4.6 cycles.
The bulk-copy forms (one 512-byte row a copy, issued by warp 0) are slower again, 22.4-25.8
us: issuing their ~200 copies takes 6.4-12.0 us, so the copy engine wants few large (2-D
tensor-map) copies, not a row each. Earlier forms of the same kernel, also slower: the q and
own-K rotations loading their operands themselves, one round trip per 8-dim segment, 23.3 us;
in rounds of four segments, 19.2. So the expert attention is not bound by its merge kernel but
by what every block must take in (all of K/V once per row block) and by mma.sync; Triton's pair
stays. What the persistent expert can use from it: a cluster barrier costs 0.3-0.5 us (a grid
barrier 1.1), and a cluster of 16 runs with the non-portable size allowed.

    python3 scripts/device/attention_cluster_probe.py [--out FILE.json]
    ncu --clock-control none --section SpeedOfLight --section WarpStateStats \
        --section SchedulerStats --section LaunchStats --section Occupancy \
        --section SourceCounters -k mqa_cluster --launch-count 1 \
        python3 scripts/device/attention_cluster_probe.py --once
"""

import argparse
import json
from dataclasses import dataclass

import torch

HEADS, D, ROWS, PREFIX, LAYERS = 8, 256, 50, 968, 18
FILL = -3.4028234663852886e38  # the eager code's finite fill for masked logits
LOG2E = 1.4426950408889634
TRITON_TILES = [16, 64, 128, 4, 1]  # the H200 build's tiles of the Triton pair


@dataclass(frozen=True)
class Form:
    """One compiled variant: `warps` x 16 query rows a block, key splits in clusters of
    `cluster` blocks; bulk: the block's reads as 1-D bulk copies (one instruction a row, counted
    on an mbarrier) instead of 16-byte cp.async."""
    warps: int
    cluster: int
    bulk: bool = False

    @property
    def name(self) -> str:
        bulk = ', bulk copies' if self.bulk else ''
        return f'{self.warps} warps, cluster {self.cluster}{bulk}'

    @property
    def rows(self) -> int:
        return 16 * self.warps

    @property
    def shared(self) -> int:
        """Dynamic shared memory: Q (rows x 264 bf16), 2 chunk buffers of K and V (64 x 264
        bf16 each) and cos / sin of up to ROWS tokens (float32); the partial outputs (rows x
        260 float32) reuse the chunk buffers."""
        return 2 * (self.rows * QS + NBUF * 2 * BN * QS) + 2 * 4 * (D // 2) * ROWS


BN, NBUF, QS, OS = 64, 2, D + 8, D + 4
# clusters of 16 blocks (one 64-key chunk each) are beyond the portable 8 and need the kernel's
# non-portable attribute; whether 7 such clusters fit at once is the driver's to say
FORMS = (Form(4, 8), Form(2, 8), Form(4, 4), Form(2, 4), Form(4, 16), Form(4, 8, True),
         Form(4, 16, True), Form(2, 8, True))
NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14  # CUfunction_attribute (cuda.h)


def timeline_forms() -> list:
    """The forms that also run once with phase stamps: 4 warps, clusters of 8 or 16."""
    return [f for f in FORMS if f.warps == 4 and f.cluster >= 8]


STAMP_NAMES = ('start', 'loads issued', 'chunk 0 in, q and own K rotated', 'chunk 0 done',
               'every chunk done', 'cluster barrier 1 (max / sum shared)', 'partials written',
               'cluster barrier 2', 'columns summed and stored', 'cluster barrier 3')


def source(form: Form, stamps: bool = False) -> str:
    """The CUDA C++ of `mqa_cluster` for one form (NVRTC, sm_90a); stamps: thread 0 of each
    block writes %globaltimer at the end of each phase (STAMP_NAMES)."""
    from bench.hopper_ptx import BF16_BITS, CLUSTER, CLUSTER_MERGE, HELPERS
    head = ('#define STAMPS\n' if stamps else '') + ('#define BULK\n' if form.bulk else '') + \
        (f'#define WARPS {form.warps}\n#define CL {form.cluster}\n#define H {HEADS}\n'
         f'#define D {D}\n#define HALF {D // 2}\n#define BN {BN}\n#define NBUF {NBUF}\n'
         f'#define QS {QS}\n#define OS {OS}\n#define FILL ({FILL!r}f)\n')
    return head + HELPERS + CLUSTER + BF16_BITS + CLUSTER_MERGE + KERNEL


KERNEL = r'''
#define THREADS (WARPS * 32)
#ifdef STAMPS  // %globaltimer (ns) at phase ends, thread 0 of each block: STAMP_NAMES
#define STAMP(k) do { if (threadIdx.x == 0) { unsigned long long t; \
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); \
    stamps[(blockIdx.y * gridDim.x + blockIdx.x) * 16 + (k)] = (long long)t; } } while (0)
#else
#define STAMP(k) do { } while (0)
#endif
#define INFINITY __int_as_float(0x7f800000)
#define R (WARPS * 16)

__device__ __forceinline__ float bf_lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf_hi(unsigned w) { return __uint_as_float(w & 0xFFFF0000u); }
__device__ __forceinline__ void ldsm4(unsigned addr, unsigned* r) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldsm4_t(unsigned addr, unsigned* r) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
// c (16 x 8, float32 fragment) += a (16 x 16 bf16) @ b (16 x 8 bf16)
__device__ __forceinline__ void mma(float* c, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_commit() {
    asm volatile("cp.async.commit_group;" ::: "memory");
}
__device__ __forceinline__ void cp_wait1() { asm volatile("cp.async.wait_group 1;" ::: "memory"); }
__device__ __forceinline__ void cp_wait0() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }
// RoPE in place on segment i.. (8 dims) of a bf16 row in shared memory and its partner at
// HALF + i.., cos / sin from shared memory too, times `scale` (float32, then bf16, as the
// Triton kernel rounds). Every operand is staged by cp.async first: a thread that loaded its
// operands from global memory itself waited a round trip per segment (~1 us each).
__device__ __forceinline__ void rope_in_place(unsigned short* x, const float* cs,
                                              const float* sn, float scale) {
    const uint4 x1 = *(const uint4*)x, x2 = *(const uint4*)(x + HALF);
    const float4 c0 = ((const float4*)cs)[0], c1 = ((const float4*)cs)[1];
    const float4 s0 = ((const float4*)sn)[0], s1 = ((const float4*)sn)[1];
    const unsigned a[4] = {x1.x, x1.y, x1.z, x1.w}, b[4] = {x2.x, x2.y, x2.z, x2.w};
    const float c[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
    const float s[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};
    unsigned o1[4], o2[4];
    #pragma unroll
    for (int j = 0; j < 4; j++) {
        const float a0 = bf_lo(a[j]), a1 = bf_hi(a[j]), b0 = bf_lo(b[j]), b1 = bf_hi(b[j]);
        o1[j] = pack2((a0 * c[2 * j] - b0 * s[2 * j]) * scale,
                      (a1 * c[2 * j + 1] - b1 * s[2 * j + 1]) * scale);
        o2[j] = pack2((b0 * c[2 * j] + a0 * s[2 * j]) * scale,
                      (b1 * c[2 * j + 1] + a1 * s[2 * j + 1]) * scale);
    }
    *(uint4*)x = make_uint4(o1[0], o1[1], o1[2], o1[3]);
    *(uint4*)(x + HALF) = make_uint4(o2[0], o2[1], o2[2], o2[3]);
}

// Stage keys j0 .. j0 + BN of this split into k_s / v_s by cp.async: the prefix's K/V rows, the
// action tokens' raw K (rotated in place once it is in) and V from qkv; rows past the split's
// end zero (0 * garbage is NaN).
__device__ __forceinline__ void stage(unsigned short* k_s, unsigned short* v_s, int j0,
                                      int key_end, int T, const unsigned short* qb, int sqt,
                                      const unsigned short* kp, int skt,
                                      const unsigned short* vp, int svt) {
    for (int i = threadIdx.x; i < BN * (D / 8); i += THREADS) {
        const int r = i / (D / 8), s = i % (D / 8), j = j0 + r;
        unsigned short* kd = k_s + r * QS + s * 8;
        unsigned short* vd = v_s + r * QS + s * 8;
        if (j >= key_end) {
            *(uint4*)kd = make_uint4(0, 0, 0, 0);
            *(uint4*)vd = make_uint4(0, 0, 0, 0);
        } else if (j < T) {
            cp_async16(smem_addr(kd), kp + (long)j * skt + s * 8);
            cp_async16(smem_addr(vd), vp + (long)j * svt + s * 8);
        } else {  // the action token j - T: its K and V follow the query heads in qkv
            const unsigned short* src = qb + (long)(j - T) * sqt + H * D + s * 8;
            cp_async16(smem_addr(kd), src);
            cp_async16(smem_addr(vd), src + D);
        }
    }
}

#ifdef BULK
// The same chunk by 1-D bulk copies (one instruction a 512-byte row, the copy engine moving the
// bytes) issued by warp 0 and counted on the buffer's mbarrier, which also expects `extra`
// bytes that warp 0 copies after (q and cos / sin, with the first chunk); rows past the split's
// end zeroed by every thread.
__device__ __forceinline__ void bulk_chunk(unsigned short* k_s, unsigned short* v_s, unsigned bar,
                                           int j0, int key_end, int T,
                                           const unsigned short* qb, int sqt,
                                           const unsigned short* kp, int skt,
                                           const unsigned short* vp, int svt, int extra) {
    const int valid = max(min(BN, key_end - j0), 0);
    if (threadIdx.x < 32) {
        if (threadIdx.x == 0) expect_bytes(bar, valid * 4 * D + extra);
        __syncwarp();
        for (int r = threadIdx.x; r < valid; r += 32) {
            const int j = j0 + r;
            const unsigned short* own = qb + (long)(j - T) * sqt + H * D;
            bulk_copy_to((unsigned char*)(k_s + r * QS),
                         (const unsigned char*)(j < T ? kp + (long)j * skt : own), 2 * D, bar);
            bulk_copy_to((unsigned char*)(v_s + r * QS),
                         (const unsigned char*)(j < T ? vp + (long)j * svt : own + D), 2 * D, bar);
        }
    }
    for (int i = threadIdx.x; i < (BN - valid) * (D / 8); i += THREADS) {
        const int r = valid + i / (D / 8), s = i % (D / 8);
        *(uint4*)(k_s + r * QS + s * 8) = make_uint4(0, 0, 0, 0);
        *(uint4*)(v_s + r * QS + s * 8) = make_uint4(0, 0, 0, 0);
    }
}
#endif

extern "C" __global__ void __launch_bounds__(THREADS, 1)
mqa_cluster(const unsigned short* __restrict__ qkv, const unsigned short* __restrict__ kp,
            const unsigned short* __restrict__ vp, const float* __restrict__ cosv,
            const float* __restrict__ sinv, const unsigned char* __restrict__ mask,
            unsigned short* __restrict__ out, int n, int T, int sqb, int sqt, int skb, int skt,
            int svb, int svt, float qk_scale, long long* stamps) {
    extern __shared__ __align__(128) unsigned char smem[];
    STAMP(0);
    unsigned short* q_s = (unsigned short*)smem;  // R x QS: q, rotated and scaled in place
    unsigned short* kv_s = q_s + R * QS;          // NBUF x (K, V) x BN x QS
    float* cs_s = (float*)(kv_s + NBUF * 2 * BN * QS);  // cos, then sin, of tokens t_lo..t_hi
    float* o_s = (float*)kv_s;                    // R x OS partial outputs, after the last chunk
    __shared__ float m_s[R], l_s[R];

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;
    const unsigned rank = cluster_rank();
    const int b = blockIdx.y, row0 = (blockIdx.x / CL) * R, rows_total = n * H;
    const int width = T + n;  // the mask's row: prefix keys, then the action tokens
    const int kps = ((width + CL - 1) / CL + BN - 1) / BN * BN;
    const int key0 = rank * kps, key_end = min(key0 + kps, width);
    const int chunks = key_end > key0 ? (key_end - key0 + BN - 1) / BN : 0;
    const unsigned short* qb = qkv + (long)b * sqb;
    kp += (long)b * skb;
    vp += (long)b * svb;
    // the tokens whose cos / sin this block reads: its query rows' and its own keys'
    const int own_lo = max(key0, T) - T, own_hi = key_end - T;
    int t_lo = row0 / H, t_hi = min((row0 + R + H - 1) / H, n);
    if (own_hi > own_lo) {
        t_lo = min(t_lo, own_lo);
        t_hi = max(t_hi, own_hi);
    }
    const int tokens = t_hi - t_lo;
    float* sn_s = cs_s + tokens * HALF;

    // every global read of the block is in flight at once: q, cos / sin, the first chunks
#ifdef BULK
    __shared__ __align__(8) unsigned long long bars[NBUF];
    if (tid == 0) {
        for (int c = 0; c < NBUF; c++)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_addr(&bars[c])));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (chunks > 0) {
        bulk_chunk(kv_s, kv_s + BN * QS, smem_addr(&bars[0]), key0, key_end, T, qb, sqt, kp, skt,
                   vp, svt, R * 2 * D + tokens * HALF * 8);
        if (warp == 0) {
            for (int r = lane; r < R; r += 32) {
                const int row = min(row0 + r, rows_total - 1);
                bulk_copy_to((unsigned char*)(q_s + r * QS),
                             (const unsigned char*)(qb + (long)(row / H) * sqt + (row % H) * D),
                             2 * D, smem_addr(&bars[0]));
            }
            for (int t = lane; t < tokens; t += 32) {
                const long at = ((long)b * n + t_lo + t) * HALF;
                bulk_copy_to((unsigned char*)(cs_s + t * HALF), (const unsigned char*)(cosv + at),
                             HALF * 4, smem_addr(&bars[0]));
                bulk_copy_to((unsigned char*)(sn_s + t * HALF), (const unsigned char*)(sinv + at),
                             HALF * 4, smem_addr(&bars[0]));
            }
        }
        for (int c = 1; c < NBUF && c < chunks; c++) {
            unsigned short* k_s = kv_s + c * 2 * BN * QS;
            bulk_chunk(k_s, k_s + BN * QS, smem_addr(&bars[c]), key0 + c * BN, key_end, T, qb,
                       sqt, kp, skt, vp, svt, 0);
        }
    }
#else
    for (int i = tid; i < R * (D / 8); i += THREADS) {
        const int r = i / (D / 8), s = i % (D / 8), row = min(row0 + r, rows_total - 1);
        cp_async16(smem_addr(q_s + r * QS + s * 8),
                   qb + (long)(row / H) * sqt + (row % H) * D + s * 8);
    }
    for (int i = tid; i < tokens * (HALF / 4); i += THREADS) {
        const long at = ((long)b * n + t_lo) * HALF + i * 4;
        cp_async16(smem_addr(cs_s + i * 4), cosv + at);
        cp_async16(smem_addr(sn_s + i * 4), sinv + at);
    }
    for (int c = 0; c < NBUF && c < chunks; c++) {
        unsigned short* k_s = kv_s + c * 2 * BN * QS;
        stage(k_s, k_s + BN * QS, key0 + c * BN, key_end, T, qb, sqt, kp, skt, vp, svt);
        cp_commit();
    }
    if (chunks == 0) cp_commit();  // q and cos / sin still need their group
#endif
    STAMP(1);

    // this warp: rows wrow + g (token A, head g) and wrow + g + 8 (token A + 1, head g)
    const int wrow = warp * 16;
    const int tok_a = min((row0 + wrow) / H, n - 1), tok_b = min((row0 + wrow + 8) / H, n - 1);
    const unsigned char* mask_a = mask + ((long)b * n + tok_a) * width;
    const unsigned char* mask_b = mask + ((long)b * n + tok_b) * width;
    const unsigned q_frag = smem_addr(q_s + (wrow + (lane & 7) + ((lane >> 3) & 1) * 8) * QS
                                      + (lane >> 4) * 8);
    float o[D / 8][4];
    #pragma unroll
    for (int i = 0; i < D / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;

    for (int c = 0; c < chunks; c++) {
        const int j0 = key0 + c * BN;
        unsigned ok = 0, keep_a = 0, keep_b = 0;  // bit 2 * n-tile + e: key j0 + 8 nt + 2 t4 + e
        #pragma unroll
        for (int nt = 0; nt < BN / 8; nt++) {
            #pragma unroll
            for (int e = 0; e < 2; e++) {
                const int j = j0 + nt * 8 + 2 * t4 + e, bit = 2 * nt + e;
                if (j < key_end) {
                    ok |= 1u << bit;
                    keep_a |= (unsigned)(mask_a[j] != 0) << bit;
                    keep_b |= (unsigned)(mask_b[j] != 0) << bit;
                }
            }
        }
#ifdef BULK
        wait_phase(smem_addr(&bars[c % NBUF]), (c / NBUF) & 1);
#else
        if (c + 1 < chunks) cp_wait1(); else cp_wait0();
#endif
        __syncthreads();
        unsigned short* k_s = kv_s + (c % NBUF) * 2 * BN * QS;
        const unsigned short* v_s = k_s + BN * QS;
        if (c == 0) {  // q: rotated, scaled into log2 units; rows past the end zero
            for (int i = tid; i < R * (HALF / 8); i += THREADS) {
                const int r = i / (HALF / 8), s = i % (HALF / 8), row = row0 + r;
                const int at = (min(row, rows_total - 1) / H - t_lo) * HALF + s * 8;
                rope_in_place(q_s + r * QS + s * 8, cs_s + at, sn_s + at,
                              row < rows_total ? qk_scale : 0.f);
            }
        }
        const int own0 = max(j0, T), own1 = min(j0 + BN, key_end);  // own keys: rotate K
        for (int i = tid; i < max(own1 - own0, 0) * (HALF / 8); i += THREADS) {
            const int r = i / (HALF / 8), s = i % (HALF / 8);
            const int at = (own0 + r - T - t_lo) * HALF + s * 8;
            rope_in_place(k_s + (own0 - j0 + r) * QS + s * 8, cs_s + at, sn_s + at, 1.0f);
        }
        if (c == 0 || own1 > own0) __syncthreads();
        if (c == 0) STAMP(2);

        float sc[BN / 8][4];
        #pragma unroll
        for (int i = 0; i < BN / 8; i++) sc[i][0] = sc[i][1] = sc[i][2] = sc[i][3] = 0.f;
        const unsigned k_frag = smem_addr(k_s + ((lane & 7) + (lane >> 4) * 8) * QS
                                          + ((lane >> 3) & 1) * 8);
        #pragma unroll
        for (int ks = 0; ks < D / 16; ks++) {
            unsigned a[4];
            ldsm4(q_frag + ks * 32, a);
            #pragma unroll
            for (int np = 0; np < BN / 16; np++) {
                unsigned kb[4];
                ldsm4(k_frag + (np * 16 * QS + ks * 16) * 2, kb);
                mma(sc[2 * np], a, kb[0], kb[1]);
                mma(sc[2 * np + 1], a, kb[2], kb[3]);
            }
        }
        float mx0 = -INFINITY, mx1 = -INFINITY;
        #pragma unroll
        for (int nt = 0; nt < BN / 8; nt++) {
            #pragma unroll
            for (int e = 0; e < 2; e++) {
                const int bit = 2 * nt + e;
                float s0 = (keep_a >> bit) & 1u ? sc[nt][e] : FILL;
                float s1 = (keep_b >> bit) & 1u ? sc[nt][2 + e] : FILL;
                if (!((ok >> bit) & 1u)) s0 = s1 = -INFINITY;
                sc[nt][e] = s0;
                sc[nt][2 + e] = s1;
                mx0 = fmaxf(mx0, s0);
                mx1 = fmaxf(mx1, s1);
            }
        }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);  // finite: a chunk has a key
        const float al0 = exp2f(m0 - mn0), al1 = exp2f(m1 - mn1);
        float rs0 = 0.f, rs1 = 0.f;
        unsigned pa[BN / 16][4];  // P as the A fragments of the 4 k-steps of P @ V
        #pragma unroll
        for (int nt = 0; nt < BN / 8; nt++) {
            const float p00 = exp2f(sc[nt][0] - mn0), p01 = exp2f(sc[nt][1] - mn0);
            const float p10 = exp2f(sc[nt][2] - mn1), p11 = exp2f(sc[nt][3] - mn1);
            rs0 += p00 + p01;
            rs1 += p10 + p11;
            pa[nt / 2][(nt % 2) * 2] = pack2(p00, p01);
            pa[nt / 2][(nt % 2) * 2 + 1] = pack2(p10, p11);
        }
        rs0 += __shfl_xor_sync(0xffffffffu, rs0, 1);
        rs0 += __shfl_xor_sync(0xffffffffu, rs0, 2);
        rs1 += __shfl_xor_sync(0xffffffffu, rs1, 1);
        rs1 += __shfl_xor_sync(0xffffffffu, rs1, 2);
        l0 = l0 * al0 + rs0;
        l1 = l1 * al1 + rs1;
        m0 = mn0;
        m1 = mn1;
        #pragma unroll
        for (int i = 0; i < D / 8; i++) {
            o[i][0] *= al0; o[i][1] *= al0; o[i][2] *= al1; o[i][3] *= al1;
        }
        const unsigned v_frag = smem_addr(v_s + ((lane & 7) + ((lane >> 3) & 1) * 8) * QS
                                          + (lane >> 4) * 8);
        #pragma unroll
        for (int ks = 0; ks < BN / 16; ks++) {
            #pragma unroll
            for (int np = 0; np < D / 16; np++) {
                unsigned vb[4];
                ldsm4_t(v_frag + (ks * 16 * QS + np * 16) * 2, vb);
                mma(o[2 * np], pa[ks], vb[0], vb[1]);
                mma(o[2 * np + 1], pa[ks], vb[2], vb[3]);
            }
        }
        __syncthreads();  // every warp is done with this buffer
        if (c == 0) STAMP(3);
        if (c + NBUF < chunks) {
            unsigned short* k_n = kv_s + (c % NBUF) * 2 * BN * QS;
#ifdef BULK
            bulk_chunk(k_n, k_n + BN * QS, smem_addr(&bars[c % NBUF]), key0 + (c + NBUF) * BN,
                       key_end, T, qb, sqt, kp, skt, vp, svt, 0);
#else
            stage(k_n, k_n + BN * QS, key0 + (c + NBUF) * BN, key_end, T, qb, sqt, kp, skt, vp,
                  svt);
            cp_commit();
#endif
        }
    }

    cp_wait0();  // (a split without keys still had q and cos / sin in flight)
    STAMP(4);
    // the splits meet: each row's max and sum over every block of the cluster
    if (t4 == 0) {
        m_s[wrow + g] = m0; l_s[wrow + g] = l0;
        m_s[wrow + g + 8] = m1; l_s[wrow + g + 8] = l1;
    }
    cluster_sync();
    STAMP(5);
    const float w0 = cluster_row_weight<CL>(m_s, l_s, wrow + g, m0);
    const float w1 = cluster_row_weight<CL>(m_s, l_s, wrow + g + 8, m1);
    #pragma unroll
    for (int i = 0; i < D / 8; i++) {
        *(float2*)&o_s[(wrow + g) * OS + i * 8 + 2 * t4] = make_float2(o[i][0] * w0, o[i][1] * w0);
        *(float2*)&o_s[(wrow + g + 8) * OS + i * 8 + 2 * t4] =
            make_float2(o[i][2] * w1, o[i][3] * w1);
    }
    STAMP(6);
    cluster_sync();
    STAMP(7);
    // this block's column slice of every row: the sum of the CL blocks' partials, in bf16
    cluster_sum_columns<CL, R, D, THREADS>(o_s, OS, rank,
                                           out + ((long)b * rows_total + row0) * D,
                                           rows_total - row0, tid);
    STAMP(8);
    cluster_sync();  // no block leaves while another still reads its shared memory
    STAMP(9);
}
'''


class ClusterAttention:
    """mqa_cluster compiled in one form: call it as te.mqa_attention is called."""

    def __init__(self, form: Form, stamps: bool = False):
        self.form = form
        self.kernel = torch.cuda._compile_kernel(source(form, stamps), 'mqa_cluster',
                                                 compute_capability='90a')
        self.stamps = torch.zeros(form.cluster * 64 * 16, dtype=torch.int64, device='cuda')
        self.kernel.set_shared_memory_config(form.shared)
        if form.cluster > 8:
            libcuda = torch.cuda._utils._get_gpu_runtime_library()
            torch.cuda._utils._check_cuda(libcuda.cuFuncSetAttribute(
                self.kernel.func, NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1))

    def __call__(self, qkv, kp, vp, cos, sin, mask, heads, scale):
        from bench.hopper_ptx import launch_cluster
        b, n, width = qkv.shape
        T = kp.shape[1]
        kp2, vp2 = kp.reshape(b, T, D), vp.reshape(b, T, D)
        for name, t in (('qkv', qkv), ('k', kp2), ('v', vp2)):
            if t.stride(-1) != 1 or t.stride(-2) % 8 or t.data_ptr() % 16:
                raise ValueError(f'mqa_cluster: {name} rows must be 16-byte aligned')
        if heads != HEADS or width != (HEADS + 2) * D or n > ROWS:
            raise ValueError(f'mqa_cluster is built for {HEADS} heads of {D}, up to {ROWS} '
                             'tokens')
        out = torch.empty(b, n, heads * D, dtype=qkv.dtype, device=qkv.device)
        blocks = -(-n * heads // self.form.rows)
        args = [qkv, kp2, vp2, cos.float().contiguous(), sin.float().contiguous(),
                mask.contiguous().view(torch.uint8), out, n, T, qkv.stride(0), qkv.stride(1),
                kp2.stride(0), kp2.stride(1), vp2.stride(0), vp2.stride(1), scale * LOG2E,
                self.stamps]
        if blocks * self.form.cluster * b * 16 > self.stamps.numel():
            raise ValueError('mqa_cluster: more blocks than the stamps buffer holds')
        launch_cluster(self.kernel, (blocks * self.form.cluster, b, 1),
                       (32 * self.form.warps, 1, 1), args, self.form.shared, self.form.cluster)
        return out

    def timeline(self, blocks: int) -> dict:
        """After a launch of a stamped form: see stamp_timeline."""
        return stamp_timeline(self.stamps, blocks, self.form.cluster, STAMP_NAMES)


def stamp_timeline(stamps, blocks: int, cluster: int, names: tuple) -> dict:
    """Stamps (16 slots a block, the first len(names) written, ns) -> each phase's median
    duration over the blocks in us, for the blocks of the last key split of each cluster (the
    own keys) and the others, the launch's span from the first block's start to the last
    block's end, and the spread of the blocks' starts."""
    t = stamps[:blocks * 16].view(blocks, 16)[:, :len(names)].cpu().double()
    steps = (t[:, 1:] - t[:, :-1]) / 1e3
    last = torch.arange(blocks) % cluster == cluster - 1
    phases = {}
    for name, rows in (('own-key split', last), ('other splits', ~last)):
        med = steps[rows].median(dim=0).values
        phases[name] = {names[i + 1]: round(float(med[i]), 2) for i in range(len(med))}
    return {'span_us': round(float((t[:, -1].max() - t[:, 0].min()) / 1e3), 2),
            'start_skew_us': round(float((t[:, 0].max() - t[:, 0].min()) / 1e3), 2),
            **phases}


def inputs(dev, strided: bool = False, seed: int = 0) -> dict:
    """One layer's attention inputs at the expert's shapes; strided: K/V as views into a
    prefix qkv buffer (968 x 2560), as the artifact reads them."""
    g = torch.Generator(device=dev).manual_seed(seed)
    bf = dict(dtype=torch.bfloat16, device=dev)
    qkv = torch.randn(1, ROWS, (HEADS + 2) * D, generator=g, device=dev).to(torch.bfloat16)
    if strided:
        buf = torch.randn(1, PREFIX, (HEADS + 2) * D, generator=g, device=dev).to(**bf)
        kp, vp = buf[:, :, HEADS * D:(HEADS + 1) * D], buf[:, :, (HEADS + 1) * D:]
    else:
        kp, vp = (torch.randn(1, PREFIX, D, generator=g, device=dev).to(**bf) for _ in 'kv')
    angle = torch.randn(1, ROWS, D // 2, generator=g, device=dev)
    mask = torch.rand(1, ROWS, PREFIX + ROWS, generator=g, device=dev) > 0.1
    mask[0, 3] = False  # a token that sees no key: the finite fill makes it uniform
    return dict(qkv=qkv, kp=kp, vp=vp, cos=angle.cos(), sin=angle.sin(), mask=mask)


def rel_error(got, want) -> float:
    return float((got.float() - want.float()).abs().max() / want.float().abs().max())


def main():
    from lamp_ros.kernels import ops, triton_expert as te, tuning
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--out', default='attention_cluster_probe.json')
    parser.add_argument('--once', action='store_true',
                        help='run the first form once on one layer, untimed (for ncu)')
    args = parser.parse_args()
    dev = 'cuda'
    scale = D ** -0.5
    if args.once:
        x = inputs(dev)
        ClusterAttention(FORMS[0])(x['qkv'], x['kp'], x['vp'], x['cos'], x['sin'], x['mask'],
                                   HEADS, scale)
        torch.cuda.synchronize()
        return
    report = {'gpu': torch.cuda.get_device_name(), 'torch': torch.__version__,
              'shape': f'{ROWS} tokens x {HEADS} heads x {D} over {PREFIX}+{ROWS} keys',
              'triton_tiles': TRITON_TILES, 'forms': {}}
    checks = {kind: inputs(dev, kind == 'strided', seed) for seed, kind in
              enumerate(('contiguous', 'strided'))}
    wants = {kind: ops.mqa_attention_reference(x['qkv'], x['kp'], x['vp'], x['cos'], x['sin'],
                                               x['mask'], HEADS, scale)
             for kind, x in checks.items()}
    layers = {kind: [inputs(dev, kind == 'strided', 10 + i) for i in range(LAYERS)]
              for kind in ('strided', 'contiguous')}

    def chain(attend, kind='strided'):
        def run():
            return [attend(x['qkv'], x['kp'], x['vp'], x['cos'], x['sin'], x['mask'], HEADS,
                           scale) for x in layers[kind]]
        return run

    def triton(qkv, kp, vp, cos, sin, mask, heads, s):
        return te.mqa_attention(qkv, kp, vp, cos, sin, mask, heads, s, TRITON_TILES)

    candidates = [('triton pair', triton)]
    for form in FORMS:
        try:
            candidates.append((form.name, ClusterAttention(form)))
        except Exception as exc:  # a form that does not build is reported, the others run
            report['forms'][form.name] = {'failed': f'{type(exc).__name__}: {str(exc)[-800:]}'}
    for name, attend in candidates:
        entry = report['forms'].setdefault(name, {})
        try:
            for kind, x in checks.items():
                got = attend(x['qkv'], x['kp'], x['vp'], x['cos'], x['sin'], x['mask'], HEADS,
                             scale)
                torch.cuda.synchronize()
                entry[f'rel_error_{kind}'] = rel_error(got, wants[kind])
                entry[f'finite_{kind}'] = bool(torch.isfinite(got).all())
            for kind, key in (('strided', 'us_per_layer'),
                              ('contiguous', 'us_per_layer_contiguous_kv')):
                entry[key] = round(tuning.gpu_time_ms(chain(attend, kind)) * 1e3 / LAYERS, 2)
        except Exception as exc:
            entry['failed'] = f'{type(exc).__name__}: {str(exc)[-800:]}'
        print(name, json.dumps(entry), flush=True)
    for form in timeline_forms():  # where the time goes
        try:
            stamped = ClusterAttention(form, stamps=True)
            chain(stamped)()
            torch.cuda.synchronize()
            blocks = -(-ROWS * HEADS // form.rows) * form.cluster
            report['forms'][form.name]['timeline'] = stamped.timeline(blocks)
        except Exception as exc:
            report['forms'][form.name]['timeline'] = f'failed: {type(exc).__name__}: {exc}'
        print(form.name, 'timeline', json.dumps(report['forms'][form.name]['timeline']),
              flush=True)
    with open(args.out, 'w', encoding='utf-8') as f:
        json.dump(report, f, indent=1)
    print(json.dumps(report, indent=1))


if __name__ == '__main__':
    main()
