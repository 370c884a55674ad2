"""The expert attention as one CUDA kernel built the way the ingest and cluster probes say it
must be: K/V taken in by a few large bulk copies of tiles packed ahead of time, dots on warpgroup
MMAs (wgmma), the key splits merged in a thread-block cluster. A probe toward the persistent
expert's attention half; the Triton pair (`_mqa_kernel` + `_mqa_combine_kernel`, 14.0 us a call
in a chain of 18 on the H200) is the figure to beat, and the first cluster kernel (mma.sync,
cp.async of K/V rows: 18.6 us, attention_cluster_probe.py) the one it replaces.

Why these choices (bench/results/README.md has the measurements): that kernel's blocks spent
4.6 us issuing ~200 KB of 16-byte copies and 3.1 more waiting for them (about 25 GB/s into an
SM, where an SM can take in 51-96 GB/s from L2 by cp.async or 8 KB bulk copies), then ~2 us a
64-key chunk in mma.sync, and 2.3-4.1 us summing the splits' outputs over distributed shared
memory. Here:

- the prefix's K and V are packed once per layer (the prefix's K/V do not change over the 10
  Euler steps): K as (keys, d) and V as V^T (d, keys), each 64-key chunk as four 8 KB tiles in
  the no-swizzle core-matrix layout wgmma reads with LBO 128 / SBO 1024 (`hopper_ptx.pack_tiles`,
  the layout wgmma_check.py proved), so a block takes in a chunk of K and V as eight 8 KB bulk
  copies issued by one thread; the action tokens' own 50 keys take the slots after the prefix's
  968 (chunk 15), written by the blocks of that chunk after its copies land (K rotated, V
  transposed into V^T);
- a block is one warpgroup over 64 query rows (8 tokens x 8 heads, all sharing the one K/V
  head): it rotates and scales its q into shared memory itself (RoPE, log2 units, bf16, as the
  Triton kernel does), then per 64-key chunk S = Q K^T (16 m64n64k16 wgmma), the mask, the
  online softmax in registers, P through shared memory (8 KB), O += P V (4 m64n256k16 wgmma,
  128 float32 accumulators a thread);
- the CL blocks of a cluster split the 16 chunks (CL = 16: one chunk a block, 112 blocks;
  CL = 8: two), and merge as the cluster probe does: every block shares its rows' max and sum,
  scales its partial output by its share, and sums one column slice of all CL partials into the
  bf16 output. No combine kernel, no partials in global memory.

Per block that is 32 KB of q (loads through registers, rotated) and 64 KB of K/V a chunk (bulk
copies) in, against 170-210 KB for the cluster probe's blocks. Optional %globaltimer stamps
(STAMP_NAMES) say where a block's time goes.

    python3 scripts/device/attention_wgmma_probe.py [--out FILE.json]

Its host side (packing, key slots, the merge) is proved on the CPU by `emulate`, which follows the
kernel's data flow on the packed buffers with the kernel's rounding points
(test/benchmarks/test_attention_wgmma_probe.py); its forms compile for sm_90a offline
(test_offline_cuda.py). Measured on the H200 (bench/results/README.md, 'Tensor-map ingest and
the expert attention on wgmma'): right numbers, 22.4 us a layer against the Triton pair's 13.9,
held by the one block that writes the own keys (6.9 us) and by the merge (4-7 us).
"""

import argparse
import json
import os
import sys
from dataclasses import dataclass

import torch

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attention_cluster_probe as acp  # noqa: E402  (the inputs, the reference, the Triton pair)

HEADS, D, HALF, ROWS, PREFIX, LAYERS = acp.HEADS, acp.D, acp.D // 2, acp.ROWS, acp.PREFIX, \
    acp.LAYERS
BN = 64  # keys a chunk, rows a block (8 tokens x 8 heads)
TILE = 64 * 64 * 2  # one packed 64 x 64 bf16 tile
CHUNK = 4 * TILE  # a chunk of K (64 keys x 256) or of V^T (256 x 64 keys)
OS = D + 4  # float32 row stride of the partial outputs in shared memory
FILL, LOG2E = acp.FILL, acp.LOG2E


@dataclass(frozen=True)
class Form:
    """`cluster` blocks split the key chunks, each taking 16 / cluster of them. pv_n64: O += P V
    as four m64n64k16 per k-step, one a 64-column tile of O (the instruction shape
    wgmma_check.py proved), instead of one m64n256k16 across the four V^T tiles: the same
    accumulator registers, in case the wide form reads its operand otherwise than modelled."""
    cluster: int
    pv_n64: bool = False

    @property
    def name(self) -> str:
        return f'cluster {self.cluster}' + (', PV as m64n64' if self.pv_n64 else '')

    @property
    def chunks_per_block(self) -> int:
        return key_chunks() // self.cluster

    @property
    def shared(self) -> int:
        """Q (4 tiles), each chunk's K and V^T (8 tiles), P (1 tile); the partial outputs
        (64 x OS float32) reuse Q and the first chunk once the MMAs are done."""
        return 4 * TILE + self.chunks_per_block * 2 * CHUNK + TILE


FORMS = (Form(16), Form(8), Form(16, pv_n64=True))
NON_PORTABLE_CLUSTER_SIZE_ALLOWED = acp.NON_PORTABLE_CLUSTER_SIZE_ALLOWED
STAMP_NAMES = ('start', 'q rotated and stored', 'mask bits read', 'own keys written',
               'first chunk in', 'chunk 0: S', 'chunk 0: softmax, P stored', 'chunks done',
               'cluster barrier 1', 'partials written', 'cluster barrier 2',
               'columns summed and stored', 'cluster barrier 3')


def tile_at(r: int, c: int) -> int:
    """The kernel's tile_at, mirrored: the byte of element (r, c) in a packed 64 x 64 tile."""
    return (r >> 3) * 1024 + (c >> 3) * 128 + (r & 7) * 16 + (c & 7) * 2


def rows256_at(r: int, d: int) -> int:
    """The kernel's rows256_at: element (r, d) of a 64 x 256 operand (q, a K chunk)."""
    return (d >> 6) * TILE + tile_at(r, d & 63)


def cols64_at(d: int, key: int) -> int:
    """The kernel's cols64_at: element (d, key) of a 256 x 64 operand (a V^T chunk)."""
    return (d >> 6) * TILE + tile_at(d & 63, key)


def key_chunks(prefix: int = PREFIX, own: int = ROWS) -> int:
    """64-key chunks over the prefix's keys and then the action tokens' own, which must all fall
    in the last chunk (968 + 50 keys: 16 chunks, the own keys in slots 968-1017 of chunk 15)."""
    chunks = -(-(prefix + own) // BN)
    if prefix // BN != (prefix + own - 1) // BN or chunks & (chunks - 1):
        raise ValueError(f'{prefix} prefix + {own} own keys: the own keys must share the last of '
                         'a power-of-two number of 64-key chunks')
    return chunks


def pack_prefix(kp: torch.Tensor, vp: torch.Tensor, own: int = ROWS) -> tuple:
    """One layer's prefix K and V (b, T, [1,] d) -> (K, V^T) packed for the kernel: per batch
    row, chunk after chunk, K's 64 keys x 256 as four tiles (rows = keys, K-dim = d) and V^T's
    256 x 64 keys as four tiles (rows = d, K-dim = keys), each tile in pack_tiles' layout;
    slots past the prefix are zeros (the own keys are written there in shared memory). One
    permuted copy each, as a graph would run it once per layer and inference. -> two
    (b, chunks * CHUNK) uint8 tensors."""
    b, T = kp.shape[0], kp.shape[1]
    chunks = key_chunks(T, own)
    packed = []
    for x, order in ((kp, (0, 1, 4, 2, 5, 3, 6)), (vp, (0, 1, 4, 5, 2, 6, 3))):
        padded = torch.zeros(b, chunks * BN, D, dtype=torch.bfloat16, device=x.device)
        padded[:, :T] = x.reshape(b, T, D)
        # (batch, chunk, key group, key, d tile, d group, d): K tiles are [d tile][key group]
        # [d group][key][d], V^T tiles [d tile][d group][key group][d][key]
        tiles = padded.view(b, chunks, 8, 8, D // 64, 8, 8).permute(order)
        packed.append(tiles.contiguous().view(b, -1).view(torch.uint8))
    return tuple(packed)


def source(form: Form, stamps: bool = False) -> str:
    """The CUDA C++ of `mqa_wgmma` for one form (NVRTC, sm_90a)."""
    from bench.hopper_ptx import BF16_BITS, CLUSTER, CLUSTER_MERGE, HELPERS, wgmma_asm
    head = ('#define STAMPS\n' if stamps else '') + ('#define PV_N64\n' if form.pv_n64 else '') + \
        (f'#define CL {form.cluster}\n#define CH {form.chunks_per_block}\n#define H {HEADS}\n'
         f'#define D {D}\n#define HALF {HALF}\n#define BN {BN}\n#define TILE {TILE}\n'
         f'#define CHUNK {CHUNK}\n#define OS {OS}\n#define FILL ({FILL!r}f)\n')
    return head + HELPERS + CLUSTER + BF16_BITS + CLUSTER_MERGE + KERNEL.replace(
        '__WGMMA_S__', wgmma_asm(64)).replace('__WGMMA_O__', wgmma_asm(256))


KERNEL = r'''
#define INFINITY __int_as_float(0x7f800000)
#ifdef STAMPS
#define STAMP(i) do { if (threadIdx.x == 0) { unsigned long long t_; \
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_)); \
    stamps[((long)blockIdx.y * gridDim.x + blockIdx.x) * 16 + (i)] = t_; } } while (0)
#else
#define STAMP(i) do { } while (0)
#endif

// byte offset of element (r, c) in a packed 64 x 64 tile (pack_tiles' layout); these three are
// mirrored in Python above (tile_at, rows256_at, cols64_at), where a test holds them to pack_tiles
__device__ __forceinline__ unsigned tile_at(int r, int c) {
    return (r >> 3) * 1024 + (c >> 3) * 128 + (r & 7) * 16 + (c & 7) * 2;
}
// byte offset of element (r, d) in a packed 64 x 256 operand (q, a K chunk): four tiles along d
__device__ __forceinline__ unsigned rows256_at(int r, int d) {
    return (d >> 6) * TILE + tile_at(r, d & 63);
}
// byte offset of element (d, key) in a packed 256 x 64 operand (a V^T chunk): four tiles down d
__device__ __forceinline__ unsigned cols64_at(int d, int key) {
    return (d >> 6) * TILE + tile_at(d & 63, key);
}
__device__ __forceinline__ float bf16_float(unsigned short bits) {
    return __uint_as_float((unsigned)bits << 16);
}
__device__ __forceinline__ void wgmma_s(float* d, u64 da, u64 db) {
    __WGMMA_S__
}
__device__ __forceinline__ void wgmma_o(float* d, u64 da, u64 db) {
    __WGMMA_O__
}
// A RoPE item: 8 dims (d = 8 g ..) of a bf16 row and their partners 128 dims on, with the row's
// cos / sin (float32). Items are loaded in batches before any is used, so that a thread waits
// for one round trip a batch, not one an item (the cluster probe's rotations took 23 us so).
struct RopeItem { uint4 x1, x2; float4 c0, c1, s0, s1; };
__device__ __forceinline__ RopeItem rope_load(const unsigned short* x, const float* c,
                                              const float* s) {
    RopeItem it;
    it.x1 = *(const uint4*)x; it.x2 = *(const uint4*)(x + HALF);
    it.c0 = *(const float4*)c; it.c1 = *(const float4*)(c + 4);
    it.s0 = *(const float4*)s; it.s1 = *(const float4*)(s + 4);
    return it;
}
// the item rotated (x1 c - x2 s, x2 c + x1 s) times `scale`, as bf16 bits
__device__ __forceinline__ void rope_rotate(const RopeItem& it, float scale, uint4& y1,
                                            uint4& y2) {
    const unsigned short* x1 = (const unsigned short*)&it.x1;
    const unsigned short* x2 = (const unsigned short*)&it.x2;
    const float c[8] = {it.c0.x, it.c0.y, it.c0.z, it.c0.w, it.c1.x, it.c1.y, it.c1.z, it.c1.w};
    const float s[8] = {it.s0.x, it.s0.y, it.s0.z, it.s0.w, it.s1.x, it.s1.y, it.s1.z, it.s1.w};
    unsigned short* o1 = (unsigned short*)&y1;
    unsigned short* o2 = (unsigned short*)&y2;
    #pragma unroll
    for (int i = 0; i < 8; i++) {
        const float u = bf16_float(x1[i]), v = bf16_float(x2[i]);
        o1[i] = (unsigned short)bf16_bits((u * c[i] - v * s[i]) * scale);
        o2[i] = (unsigned short)bf16_bits((v * c[i] + u * s[i]) * scale);
    }
}
// items a thread loads before it stores any: all of its q items in one round at one chunk a
// block; 4 at two chunks, whose keep bits and own-key loop take the registers 8 would need
#define ROPE_BATCH (CH == 1 ? 8 : 4)
#define V_BATCH 8

// Rows of a block: 64 (token, head) pairs, token-major, tokens 8 rb .. 8 rb + 7. Keys: the
// prefix's T, then the n action tokens' own, in 64-key chunks; the block of cluster rank `rank`
// takes chunks rank * CH ... Grid (7 * CL, batch), clusters of CL along x.
extern "C" __global__ void __launch_bounds__(128, 1)
mqa_wgmma(const unsigned short* __restrict__ qkv, const unsigned char* __restrict__ kpk,
          const unsigned char* __restrict__ vpk, const float* __restrict__ cosv,
          const float* __restrict__ sinv, const unsigned char* __restrict__ mask,
          unsigned short* __restrict__ out, int n, int T, int sqb, int sqt, float qk_scale,
          unsigned long long* stamps) {
    extern __shared__ __align__(1024) unsigned char smem[];
    unsigned char* q_s = smem;
    unsigned char* kv_s = smem + 4 * TILE;
    unsigned char* p_s = kv_s + CH * 2 * CHUNK;
    float* o_s = (float*)smem;  // after the MMAs
    __shared__ __align__(8) unsigned long long bars[CH];
    __shared__ float m_s[BN], l_s[BN];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int b = blockIdx.y, rank = (int)cluster_rank(), rb = blockIdx.x / CL;
    const int width = T + n, chunks = CL * CH;
    const unsigned short* qkv_b = qkv + (long)b * sqb;
    STAMP(0);
    if (tid == 0) {
        for (int c = 0; c < CH; c++)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_addr(&bars[c])));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        for (int c = 0; c < CH; c++) {  // the chunk's K and V^T: eight 8 KB bulk copies
            const long at = ((long)b * chunks + rank * CH + c) * CHUNK;
            expect_bytes(smem_addr(&bars[c]), 2 * CHUNK);
            for (int t = 0; t < 4; t++) {
                bulk_copy_to(kv_s + c * 2 * CHUNK + t * TILE, kpk + at + t * TILE, TILE,
                             smem_addr(&bars[c]));
                bulk_copy_to(kv_s + c * 2 * CHUNK + CHUNK + t * TILE, vpk + at + t * TILE, TILE,
                             smem_addr(&bars[c]));
            }
        }
    }
    __syncthreads();  // the barriers exist before any thread waits on them
    // q: rotate, scale into log2 units, round to bf16, store packed (rows x d); rows of
    // tokens past n are zeros (their items stay zero, which rotate to zeros). Item i is row
    // (i & 7) + 8 (i >> 7), dims 8 ((i >> 3) & 15): a warp's 16-byte stores then fall on 32
    // distinct bank quads (a tile's rows are 16 bytes apart, its 8-dim groups 128)
    for (int i0 = tid; i0 < BN * (HALF / 8); i0 += 128 * ROPE_BATCH) {
        RopeItem it[ROPE_BATCH];
        #pragma unroll
        for (int u = 0; u < ROPE_BATCH; u++) {
            const int i = i0 + 128 * u, r = (i & 7) | (i >> 7 << 3), g = (i >> 3) & 15;
            const int t = rb * 8 + (r >> 3);
            it[u] = RopeItem{};
            if (i < BN * (HALF / 8) && t < n)
                it[u] = rope_load(qkv_b + t * sqt + (r & 7) * D + g * 8,
                                  cosv + ((long)b * n + t) * HALF + g * 8,
                                  sinv + ((long)b * n + t) * HALF + g * 8);
        }
        #pragma unroll
        for (int u = 0; u < ROPE_BATCH; u++) {
            const int i = i0 + 128 * u, r = (i & 7) | (i >> 7 << 3), g = (i >> 3) & 15;
            if (i < BN * (HALF / 8)) {
                uint4 y1, y2;
                rope_rotate(it[u], qk_scale, y1, y2);
                *(uint4*)(q_s + rows256_at(r, g * 8)) = y1;
                *(uint4*)(q_s + rows256_at(r, HALF + g * 8)) = y2;
            }
        }
    }
    STAMP(1);
    // the mask of this thread's two rows (tokens 8 rb + 2 warp [+ 1], the same head) for its
    // key pairs of every chunk: bit 2 j + e of keep0 / keep1 for column 8 j + 2 (lane % 4) + e
    const int t0 = rb * 8 + 2 * warp, t1 = t0 + 1, quad = lane & 3;
    unsigned keep0[CH], keep1[CH];
    #pragma unroll
    for (int c = 0; c < CH; c++) {
        keep0[c] = keep1[c] = 0;
        #pragma unroll
        for (int j = 0; j < 8; j++) {
            const int key = (rank * CH + c) * BN + 8 * j + 2 * quad;
            #pragma unroll
            for (int e = 0; e < 2; e++) {
                if (key + e >= width) continue;  // past the last key: never kept (-inf below)
                const unsigned k0 = t0 < n ? mask[((long)b * n + t0) * width + key + e] : 1;
                const unsigned k1 = t1 < n ? mask[((long)b * n + t1) * width + key + e] : 1;
                keep0[c] |= (k0 != 0) << (2 * j + e);
                keep1[c] |= (k1 != 0) << (2 * j + e);
            }
        }
    }
    STAMP(2);
    // the own keys: written by the blocks whose chunk holds them, once their copies are in
    for (int c = 0; c < CH; c++) {
        const int first = (rank * CH + c) * BN;
        if (T >= first + BN || T + n <= first) continue;
        wait_or_trap(smem_addr(&bars[c]), 0);
        unsigned char* k_s = kv_s + c * 2 * CHUNK;
        unsigned char* v_s = k_s + CHUNK;
        // K, rotated: item i is own key (i & 7) + 8 (i >> 7), dims 8 ((i >> 3) & 15), as q
        const int k_items = (n + 7) / 8 * 128;
        for (int i0 = tid; i0 < k_items; i0 += 128 * ROPE_BATCH) {
            RopeItem it[ROPE_BATCH];
            #pragma unroll
            for (int u = 0; u < ROPE_BATCH; u++) {
                const int i = i0 + 128 * u, j = (i & 7) | (i >> 7 << 3), g = (i >> 3) & 15;
                if (i < k_items && j < n)
                    it[u] = rope_load(qkv_b + j * sqt + H * D + g * 8,
                                      cosv + ((long)b * n + j) * HALF + g * 8,
                                      sinv + ((long)b * n + j) * HALF + g * 8);
            }
            #pragma unroll
            for (int u = 0; u < ROPE_BATCH; u++) {
                const int i = i0 + 128 * u, j = (i & 7) | (i >> 7 << 3), g = (i >> 3) & 15;
                const int slot = T + j - first;
                if (i < k_items && j < n) {
                    uint4 y1, y2;
                    rope_rotate(it[u], 1.f, y1, y2);
                    *(uint4*)(k_s + rows256_at(slot, g * 8)) = y1;
                    *(uint4*)(k_s + rows256_at(slot, HALF + g * 8)) = y2;
                }
            }
        }
        // V into V^T, two keys (a slot pair) a 32-bit word: item i is slot pair p0 + (i & 3) +
        // 4 (i >> 7), dims 8 g with g = (i >> 2) & 31; it stores its 8 words in the order
        // w = (step + g) % 8, so that a warp's stores fall on 32 distinct banks (a word's bank
        // is 4 (d % 8) + the pair's place in its 8 keys). A slot whose key is a prefix key (at
        // an odd first slot) keeps the copied value: only the own half is stored then.
        const int s0 = T - first, p0 = s0 >> 1, pairs = ((s0 + n - 1) >> 1) - p0 + 1;
        const int v_items = (pairs + 3) / 4 * 128;
        for (int i0 = tid; i0 < v_items; i0 += 128 * V_BATCH) {
            uint4 va[V_BATCH], vb[V_BATCH];
            #pragma unroll
            for (int u = 0; u < V_BATCH; u++) {
                const int i = i0 + 128 * u, g = (i >> 2) & 31;
                const int ja = 2 * (p0 + (i & 3) + 4 * (i >> 7)) - s0, jb = ja + 1;
                va[u] = vb[u] = make_uint4(0, 0, 0, 0);
                if (i < v_items && ja >= 0 && ja < n)
                    va[u] = *(const uint4*)(qkv_b + ja * sqt + (H + 1) * D + g * 8);
                if (i < v_items && jb < n)
                    vb[u] = *(const uint4*)(qkv_b + jb * sqt + (H + 1) * D + g * 8);
            }
            #pragma unroll
            for (int u = 0; u < V_BATCH; u++) {
                const int i = i0 + 128 * u, g = (i >> 2) & 31, p = p0 + (i & 3) + 4 * (i >> 7);
                const int ja = 2 * p - s0, jb = ja + 1;
                if (i >= v_items || ja >= n) continue;
                const unsigned a[4] = {va[u].x, va[u].y, va[u].z, va[u].w};
                const unsigned bb[4] = {vb[u].x, vb[u].y, vb[u].z, vb[u].w};
                unsigned word[8];  // word[w]: dim 8 g + w of key a (low half), key b (high)
                #pragma unroll
                for (int k = 0; k < 4; k++) {
                    word[2 * k] = __byte_perm(a[k], bb[k], 0x5410);
                    word[2 * k + 1] = __byte_perm(a[k], bb[k], 0x7632);
                }
                #pragma unroll
                for (int bit = 1; bit < 8; bit <<= 1) {  // rotate: word[k] <- word[(k + g) % 8]
                    unsigned turned[8];
                    #pragma unroll
                    for (int k = 0; k < 8; k++) turned[k] = (g & bit) ? word[(k + bit) & 7]
                                                                      : word[k];
                    #pragma unroll
                    for (int k = 0; k < 8; k++) word[k] = turned[k];
                }
                #pragma unroll
                for (int step = 0; step < 8; step++) {
                    unsigned char* at = v_s + cols64_at(g * 8 + ((step + g) & 7), 2 * p);
                    if (ja >= 0 && jb < n) *(unsigned*)at = word[step];
                    else if (ja >= 0) *(unsigned short*)at = (unsigned short)word[step];
                    else *(unsigned short*)(at + 2) = (unsigned short)(word[step] >> 16);
                }
            }
        }
    }
    STAMP(3);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // thread stores -> wgmma
    __syncthreads();

    float o[128];
    #pragma unroll
    for (int i = 0; i < 128; i++) o[i] = 0.f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
    const int r0 = 16 * warp + (lane >> 2), r1 = r0 + 8;
    #pragma unroll
    for (int c = 0; c < CH; c++) {
        wait_or_trap(smem_addr(&bars[c]), 0);
        if (c == 0) STAMP(4);
        const unsigned char* k_s = kv_s + c * 2 * CHUNK;
        float s[32];
        #pragma unroll
        for (int i = 0; i < 32; i++) s[i] = 0.f;
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
        #pragma unroll
        for (int k = 0; k < D / 16; k++) {
            const unsigned step = (k >> 2) * TILE + 256 * (k & 3);
            wgmma_s(s, descriptor(smem_addr(q_s) + step, 128, 1024),
                    descriptor(smem_addr(k_s) + step, 128, 1024));
        }
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        if (c == 0) STAMP(5);
        // mask (the eager code's finite fill; keys past the end count for nothing), row max
        const int key0 = (rank * CH + c) * BN + 2 * quad;
        float big0 = m0, big1 = m1;
        #pragma unroll
        for (int j = 0; j < 8; j++) {
            #pragma unroll
            for (int e = 0; e < 2; e++) {
                const bool inside = key0 + 8 * j + e < width;
                const int bit = 2 * j + e;
                s[4 * j + e] = !inside ? -INFINITY : (keep0[c] >> bit & 1) ? s[4 * j + e] : FILL;
                s[4 * j + 2 + e] = !inside ? -INFINITY
                    : (keep1[c] >> bit & 1) ? s[4 * j + 2 + e] : FILL;
                big0 = fmaxf(big0, s[4 * j + e]);
                big1 = fmaxf(big1, s[4 * j + 2 + e]);
            }
        }
        big0 = fmaxf(big0, __shfl_xor_sync(0xffffffff, big0, 1));
        big0 = fmaxf(big0, __shfl_xor_sync(0xffffffff, big0, 2));
        big1 = fmaxf(big1, __shfl_xor_sync(0xffffffff, big1, 1));
        big1 = fmaxf(big1, __shfl_xor_sync(0xffffffff, big1, 2));
        const float a0 = exp2f(m0 - big0), a1 = exp2f(m1 - big1);
        m0 = big0; m1 = big1;
        float sum0 = 0.f, sum1 = 0.f;
        #pragma unroll
        for (int j = 0; j < 8; j++) {
            const float p00 = exp2f(s[4 * j] - m0), p01 = exp2f(s[4 * j + 1] - m0);
            const float p10 = exp2f(s[4 * j + 2] - m1), p11 = exp2f(s[4 * j + 3] - m1);
            sum0 += p00 + p01; sum1 += p10 + p11;
            *(unsigned*)(p_s + tile_at(r0, 8 * j + 2 * quad)) = pack2(p00, p01);
            *(unsigned*)(p_s + tile_at(r1, 8 * j + 2 * quad)) = pack2(p10, p11);
        }
        l0 = l0 * a0 + sum0; l1 = l1 * a1 + sum1;
        #pragma unroll
        for (int j = 0; j < 32; j++) {
            o[4 * j] *= a0; o[4 * j + 1] *= a0; o[4 * j + 2] *= a1; o[4 * j + 3] *= a1;
        }
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads();  // all of P is in
        if (c == 0) STAMP(6);
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
        #pragma unroll
        for (int k = 0; k < BN / 16; k++) {
#ifdef PV_N64  // columns 64 t.. of O are its registers 32 t.., as in the wide form
            #pragma unroll
            for (int t = 0; t < D / 64; t++)
                wgmma_s(o + 32 * t, descriptor(smem_addr(p_s) + 256 * k, 128, 1024),
                        descriptor(smem_addr(k_s + CHUNK + t * TILE) + 256 * k, 128, 1024));
#else
            wgmma_o(o, descriptor(smem_addr(p_s) + 256 * k, 128, 1024),
                    descriptor(smem_addr(k_s + CHUNK) + 256 * k, 128, 1024));
#endif
        }
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        __syncthreads();  // P may be written again
    }
    STAMP(7);
    // the splits meet: every row's max and sum over the cluster's blocks
    l0 += __shfl_xor_sync(0xffffffff, l0, 1); l0 += __shfl_xor_sync(0xffffffff, l0, 2);
    l1 += __shfl_xor_sync(0xffffffff, l1, 1); l1 += __shfl_xor_sync(0xffffffff, l1, 2);
    if (quad == 0) { m_s[r0] = m0; l_s[r0] = l0; m_s[r1] = m1; l_s[r1] = l1; }
    cluster_sync();
    STAMP(8);
    const float w0 = cluster_row_weight<CL>(m_s, l_s, r0, m0);
    const float w1 = cluster_row_weight<CL>(m_s, l_s, r1, m1);
    #pragma unroll
    for (int j = 0; j < 32; j++) {
        const int col = 8 * j + 2 * quad;
        *(float2*)&o_s[r0 * OS + col] = make_float2(o[4 * j] * w0, o[4 * j + 1] * w0);
        *(float2*)&o_s[r1 * OS + col] = make_float2(o[4 * j + 2] * w1, o[4 * j + 3] * w1);
    }
    STAMP(9);
    cluster_sync();
    STAMP(10);
    // this block's column slice of every row: the sum of the CL partials, in bf16 (row r of
    // the block is (token 8 rb + r / 8, head r % 8): out's row (token * H + head) = 64 rb + r)
    cluster_sum_columns<CL, BN, D, 128>(o_s, OS, rank, out + ((long)b * n * H + rb * BN) * D,
                                        n * H - rb * BN, tid);
    STAMP(11);
    cluster_sync();  // no block leaves while another still reads its shared memory
    STAMP(12);
}
'''


class WgmmaAttention:
    """mqa_wgmma in one form. Pack each layer's K/V once (`pack_prefix`: they do not change over
    the Euler steps), then call it as te.mqa_attention is called, with the packed pair in place
    of kp, vp."""

    def __init__(self, form: Form, stamps: bool = False):
        self.form = form
        self.kernel = torch.cuda._compile_kernel(source(form, stamps), 'mqa_wgmma',
                                                 compute_capability='90a')
        self.stamps = torch.zeros(2 * 7 * form.cluster * 16, dtype=torch.int64, device='cuda')
        self.kernel.set_shared_memory_config(form.shared)
        if form.cluster > 8:
            libcuda = torch.cuda._utils._get_gpu_runtime_library()
            torch.cuda._utils._check_cuda(libcuda.cuFuncSetAttribute(
                self.kernel.func, NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1))

    def __call__(self, qkv, packed, cos, sin, mask, heads, scale, prefix=PREFIX):
        from bench.hopper_ptx import launch_cluster
        b, n, width = qkv.shape
        kpk, vpk = packed
        chunks = key_chunks(prefix, n)
        if heads != HEADS or width != (HEADS + 2) * D or qkv.stride(2) != 1 \
                or qkv.stride(1) % 8 or qkv.data_ptr() % 16:
            raise ValueError(f'mqa_wgmma: qkv {tuple(qkv.shape)} is not 16-byte aligned q/k/v '
                             f'of {HEADS} heads of {D}')
        if chunks != self.form.cluster * self.form.chunks_per_block or \
                kpk.shape != (b, chunks * CHUNK) or vpk.shape != kpk.shape:
            raise ValueError(f'mqa_wgmma: packed K/V {tuple(kpk.shape)} are not {chunks} '
                             f'chunks a batch row')
        if mask.shape != (b, n, prefix + n):
            raise ValueError(f'mqa_wgmma: mask {tuple(mask.shape)} is not ({b}, {n}, '
                             f'{prefix + n})')
        out = torch.empty(b, n, heads * D, dtype=qkv.dtype, device=qkv.device)
        row_blocks = -(-n * heads // BN)
        args = [qkv, kpk, vpk, cos.float().contiguous(), sin.float().contiguous(),
                mask.contiguous().view(torch.uint8), out, n, prefix, qkv.stride(0),
                qkv.stride(1), scale * LOG2E, self.stamps]
        launch_cluster(self.kernel, (row_blocks * self.form.cluster, b, 1), (128, 1, 1), args,
                       self.form.shared, self.form.cluster)
        return out

    def timeline(self, blocks: int) -> dict:
        """After a stamped launch (batch 1): acp.stamp_timeline (the own keys are in the
        last rank of each cluster here too)."""
        return acp.stamp_timeline(self.stamps, blocks, self.form.cluster, STAMP_NAMES)


def emulate(qkv, packed, cos, sin, mask, heads, scale, prefix=PREFIX, cluster=16):
    """The kernel's data flow on the CPU, in float32 with its rounding points: q rotated and
    scaled then rounded to bf16, the own K rotated and rounded, K and V^T read back from the
    packed chunks, per block (64 rows) and 64-key chunk the scores, the fill, the online softmax
    with P rounded to bf16 for the second product, and the cluster's merge of the blocks' (max,
    sum, output) -> (b, n, heads * d) bf16. What it proves: the packing, the key slots and the
    merge; the kernel's shared-memory addressing is proved on the device against the
    reference."""
    from bench.hopper_ptx import unpack_tiles
    b, n, _ = qkv.shape
    kpk, vpk = packed
    chunks = key_chunks(prefix, n)
    per_block = chunks // cluster
    from lamp_ros.policies.gemma import rotate  # the policy's RoPE (float32 in, float32 out)
    f, c, s = qkv.float(), cos.float(), sin.float()
    q = rotate(f[:, :, :heads * D].reshape(b, n, heads, D), c, s)
    q = (q * (scale * LOG2E)).to(torch.bfloat16).float()
    k_own = rotate(f[:, :, heads * D:(heads + 1) * D].reshape(b, n, 1, D), c, s)
    k_own = k_own.reshape(b, n, D).to(torch.bfloat16).float()
    v_own = f[:, :, (heads + 1) * D:].to(torch.bfloat16).float()
    keys = torch.zeros(b, chunks * BN, D)
    vals = torch.zeros(b, chunks * BN, D)
    for i in range(b):
        keys[i] = unpack_tiles(kpk[i].cpu(), chunks * BN, D).float()
        for c in range(chunks):
            part = vpk[i, c * CHUNK:(c + 1) * CHUNK].cpu()
            vals[i, c * BN:(c + 1) * BN] = unpack_tiles(part, D, BN).float().t()
    keys[:, prefix:prefix + n], vals[:, prefix:prefix + n] = k_own, v_own
    rows = q.reshape(b, n * heads, D)  # row = token * heads + head
    keep = mask.bool().repeat_interleave(heads, 1)  # (b, rows, T + n)
    width = prefix + n
    out = torch.empty(b, n * heads, D)
    for r0 in range(0, n * heads, BN):
        qr, kr = rows[:, r0:r0 + BN], keep[:, r0:r0 + BN]
        ms, ls, os_ = [], [], []
        for block in range(cluster):
            m = torch.full(qr.shape[:2], float('-inf'))
            l_ = torch.zeros(qr.shape[:2])
            o = torch.zeros(*qr.shape[:2], D)
            for c in range(block * per_block, (block + 1) * per_block):
                ks = slice(c * BN, (c + 1) * BN)
                s = qr @ keys[:, ks].transpose(1, 2)
                key = torch.arange(c * BN, (c + 1) * BN)
                inside = key < width
                kept = torch.zeros_like(s, dtype=torch.bool)
                kept[..., inside] = kr[..., key[inside]]
                s = torch.where(kept, s, torch.tensor(FILL))
                s = torch.where(inside, s, torch.tensor(float('-inf')))
                big = torch.maximum(m, s.amax(-1))
                alpha = torch.exp2(m - big)
                p = torch.exp2(s - big[..., None])
                l_ = l_ * alpha + p.sum(-1)
                o = o * alpha[..., None] + p.to(torch.bfloat16).float() @ vals[:, ks]
                m = big
            ms.append(m)
            ls.append(l_)
            os_.append(o)
        big = torch.stack(ms).amax(0)
        total = sum(l_ * torch.exp2(m - big) for m, l_ in zip(ms, ls))
        out[:, r0:r0 + BN] = sum(o * (torch.exp2(m - big) / total)[..., None]
                                 for m, o in zip(ms, os_))
    return out.reshape(b, n, heads * D).to(torch.bfloat16)


def main():
    from lamp_ros.kernels import ops, triton_expert as te, tuning
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--out', default='attention_wgmma_probe.json')
    args = parser.parse_args()
    dev = 'cuda'
    scale = D ** -0.5
    report = {'gpu': torch.cuda.get_device_name(), 'torch': torch.__version__,
              'shape': f'{ROWS} tokens x {HEADS} heads x {D} over {PREFIX}+{ROWS} keys',
              'triton_tiles': acp.TRITON_TILES, 'forms': {}}
    checks = {kind: acp.inputs(dev, kind == 'strided', seed) for seed, kind in
              enumerate(('contiguous', 'strided'))}
    wants = {kind: ops.mqa_attention_reference(x['qkv'], x['kp'], x['vp'], x['cos'], x['sin'],
                                               x['mask'], HEADS, scale)
             for kind, x in checks.items()}
    layers = [acp.inputs(dev, True, 10 + i) for i in range(LAYERS)]
    packed = [pack_prefix(x['kp'], x['vp']) for x in layers]
    t = tuning.gpu_time_ms(lambda: [pack_prefix(x['kp'], x['vp']) for x in layers])
    report['pack_us_per_layer_torch_ops'] = round(t * 1e3 / LAYERS, 2)

    def triton_chain():
        return [te.mqa_attention(x['qkv'], x['kp'], x['vp'], x['cos'], x['sin'], x['mask'],
                                 HEADS, scale, acp.TRITON_TILES) for x in layers]

    entry = report['forms']['triton pair'] = {}
    for kind, x in checks.items():
        got = te.mqa_attention(x['qkv'], x['kp'], x['vp'], x['cos'], x['sin'], x['mask'],
                               HEADS, scale, acp.TRITON_TILES)
        entry[f'rel_error_{kind}'] = acp.rel_error(got, wants[kind])
    entry['us_per_layer'] = round(tuning.gpu_time_ms(triton_chain) * 1e3 / LAYERS, 2)
    print('triton pair', json.dumps(entry), flush=True)
    for form in FORMS:
        entry = report['forms'][form.name] = {'shared_bytes': form.shared}
        try:
            attend = WgmmaAttention(form)
            for kind, x in checks.items():
                got = attend(x['qkv'], pack_prefix(x['kp'], x['vp']), x['cos'], x['sin'],
                             x['mask'], HEADS, scale)
                torch.cuda.synchronize()
                entry[f'rel_error_{kind}'] = acp.rel_error(got, wants[kind])
                entry[f'finite_{kind}'] = bool(torch.isfinite(got).all())
                entry[f'rel_error_to_emulation_{kind}'] = acp.rel_error(got, emulate(
                    x['qkv'].cpu(), [p.cpu() for p in pack_prefix(x['kp'], x['vp'])],
                    x['cos'].cpu(), x['sin'].cpu(), x['mask'].cpu(), HEADS, scale,
                    cluster=form.cluster).to(got.device))

            def chain():
                return [attend(x['qkv'], p, x['cos'], x['sin'], x['mask'], HEADS, scale)
                        for x, p in zip(layers, packed)]
            entry['us_per_layer'] = round(tuning.gpu_time_ms(chain) * 1e3 / LAYERS, 2)
            entry['triton_over_this'] = round(
                report['forms']['triton pair']['us_per_layer'] / entry['us_per_layer'], 2)
            stamped = WgmmaAttention(form, stamps=True)
            for x, p in zip(layers, packed):
                stamped(x['qkv'], p, x['cos'], x['sin'], x['mask'], HEADS, scale)
            torch.cuda.synchronize()
            entry['timeline'] = stamped.timeline(-(-ROWS * HEADS // BN) * form.cluster)
        except Exception as exc:  # a form that fails is reported, the others run
            entry['failed'] = f'{type(exc).__name__}: {str(exc)[-800:]}'
        print(form.name, json.dumps(entry), flush=True)
        with open(args.out, 'w', encoding='utf-8') as f:
            json.dump(report, f, indent=1)


if __name__ == '__main__':
    main()
