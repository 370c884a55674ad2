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
layout. The norm is folded: phase B's last K slice of each column tile writes X * scale (the
next layer's, packed) and its rows' sums of squares, phase A multiplies its accumulators by the
rows' 1 / rms and adds shift @ W^T (precomputed, `bias`). Split-K sums are in K-slice order, so
the result is the same every run.

It reports the error against a float32 torch reference with the same bf16 roundings, whether two
runs are bit-identical, and the time per layer beside the same MLP half as torch ops in one CUDA
graph (rms_norm, cuBLAS gate/up, GeGLU, cuBLAS down, gated residual).

    PYTHONPATH=$PWD timeout 300 python3 scripts/device/mlp_chain_probe.py [--out FILE.json]

(the timeout: a kernel that waits on a barrier nobody completes hangs; the first run of a
hand-written one should not take the whole device call with it)

Written on 2026-12-01 without device time: it compiles for sm_90a (bench/offline_cuda.py,
test/benchmarks/test_offline_cuda.py) and its host side (tile packing, the kernel's stream
order) is tested on CPU against the reference; it has not run on the H200 yet.
"""

import json
import os
import sys

import torch

sys.path.insert(0, os.getcwd())
from bench.hopper_ptx import (BF16_BITS, GRID_SYNC, HELPERS, LAST_TO_ARRIVE,  # noqa: E402
                              LOAD_CG, mma_tile_source, pack_tiles)
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
assert BLOCKS == NT_B * SPLITS

SOURCE = '\n'.join((HELPERS, BF16_BITS, GRID_SYNC, LOAD_CG, LAST_TO_ARRIVE, '__MMA_TILE__')) + r'''
#define NBUF __NBUF__
#define TILE 8192
#define KA __KA__
#define KB __KB__
#define NT_B __NT_B__
#define SPLITS __SPLITS__
#define WIDTH __WIDTH__
#define VROWS __ROWS__
#define PER_LAYER (KA + KB)

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

// W: per layer, per block, PER_LAYER tiles (KA of phase A, then KB of phase B)
// xs[2]: X * scale packed (the GEMM's A operand); res[2]: X, row-major bf16 (the residual)
// ssq[2]: per column tile, per row, the sum of squares of X's 64 columns there
// bias: per layer, per block, 64 floats (shift @ [Wg | Wu]^T in the block's column order)
// scale: per layer + 1, WIDTH floats; gate: per layer, WIDTH floats
extern "C" __global__ void __launch_bounds__(128, 1)
mlp_chain(const unsigned char* __restrict__ W, unsigned char* xs0, unsigned char* xs1,
          unsigned short* res0, unsigned short* res1, unsigned char* H, float* part, int* count,
          float* ssq, const float* __restrict__ bias, const float* __restrict__ scale,
          const float* __restrict__ gate, unsigned* bar, int layers) {
    extern __shared__ __align__(1024) unsigned char smem[];
    __shared__ __align__(8) u64 wbars[NBUF];
    __shared__ __align__(8) u64 xbars[KA];
    unsigned char* sx = smem;             // KA activation tiles
    unsigned char* sw = smem + KA * TILE;  // the weight ring
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, b = blockIdx.x;
    const int total = layers * PER_LAYER;
    #define W_TILE(g) (W + ((long long)((g) / PER_LAYER) * gridDim.x * PER_LAYER \
                            + (long long)b * PER_LAYER + (g) % PER_LAYER) * TILE)
    #define FETCH(g) do { unsigned bar_ = smem_addr(&wbars[(g) % NBUF]); \
        expect_bytes(bar_, TILE); \
        bulk_copy_to(sw + ((g) % NBUF) * TILE, W_TILE(g), TILE, bar_); } while (0)
    if (tid == 0) {
        for (int i = 0; i < NBUF; i++)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_addr(&wbars[i])));
        for (int i = 0; i < KA; i++)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_addr(&xbars[i])));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        for (int g = 0; g < NBUF - 1 && g < total; g++) FETCH(g);
    }
    __syncthreads();
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
            const int nk = phase ? KB : KA;
            const unsigned char* src = phase ? H + (long long)s * KB * TILE : xs_cur;
            if (tid == 0) {  // this phase's activation tiles, written by other blocks' stores
                asm volatile("fence.proxy.async.global;" ::: "memory");
                for (int i = 0; i < nk; i++) {
                    unsigned xb = smem_addr(&xbars[i]);
                    expect_bytes(xb, TILE);
                    bulk_copy_to(sx + i * TILE, src + (long long)i * TILE, TILE, xb);
                }
            }
            float d[32];
            #pragma unroll
            for (int r = 0; r < 32; r++) d[r] = 0.f;
            for (int i = 0; i < nk; i++, g++) {
                const int buf = g % NBUF;
                wait_phase(smem_addr(&wbars[buf]), (wph >> buf) & 1u);
                wph ^= 1u << buf;
                wait_phase(smem_addr(&xbars[i]), (xph >> i) & 1u);
                xph ^= 1u << i;
                mma_tile(d, sx + i * TILE, sw + buf * TILE);
                asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
                __syncthreads();  // the previous tile's slot is free: refill it
                if (tid == 0 && g + NBUF - 1 < total) FETCH(g + NBUF - 1);
            }
            asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
            if (phase == 0) {
                // H[:, 32 b + c] = gelu(G) * U, G and U = rstd * acc + bias (columns c, c + 32)
                const float* bl = bias + ((long long)l * gridDim.x + b) * 64;
                #pragma unroll
                for (int half = 0; half < 2; half++) {
                    const int row = 16 * warp + lane / 4 + 8 * half;
                    float sum = 0.f;
                    for (int t = 0; t < NT_B; t++)
                        sum += ld_cg_f32(ssq + ((long long)cur * NT_B + t) * 64 + row);
                    const float rstd = rsqrtf(sum / WIDTH + __EPS__);
                    #pragma unroll
                    for (int j = 0; j < 4; j++) {
                        const int c = 8 * j + 2 * (lane % 4);
                        float h[2];
                        #pragma unroll
                        for (int e = 0; e < 2; e++) {
                            float gv = rstd * d[4 * j + 2 * half + e] + bl[c + e];
                            float uv = rstd * d[4 * (j + 4) + 2 * half + e] + bl[32 + c + e];
                            h[e] = row < VROWS ? gelu_tanh(gv) * uv : 0.f;
                        }
                        *(unsigned*)(H + packed(row, 32 * b + c)) =
                            bf16_bits(h[0]) | (bf16_bits(h[1]) << 16);
                    }
                }
            } else {
                // this K slice's partial tile, then the tile's last slice sums all in order
                float* mine = part + ((long long)s * NT_B + n) * 64 * 64;
                #pragma unroll
                for (int r = 0; r < 32; r += 2) {
                    const int row = 16 * warp + lane / 4 + 8 * ((r % 4) / 2);
                    const int col = 8 * (r / 4) + 2 * (lane % 4);
                    *(float2*)(mine + row * 64 + col) = make_float2(d[r], d[r + 1]);
                }
                if (last_to_arrive(count + n, SPLITS)) {
                    const int row = tid >> 1, c0 = (tid & 1) * 32;
                    const float* gl = gate + (long long)l * WIDTH + 64 * n;
                    const float* sc = scale + (long long)(l + 1) * WIDTH + 64 * n;
                    float ss = 0.f;
                    #pragma unroll
                    for (int q = 0; q < 8; q++) {
                        const int col = c0 + 4 * q;
                        float4 acc = ld_cg4f(part + (long long)n * 64 * 64 + row * 64 + col);
                        for (int k = 1; k < SPLITS; k++) {
                            float4 v = ld_cg4f(
                                part + ((long long)k * NT_B + n) * 64 * 64 + row * 64 + col);
                            acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
                        }
                        const float sum[4] = {acc.x, acc.y, acc.z, acc.w};
                        uint2 rb = ld_cg_u32x2(res_cur + (long long)row * WIDTH + 64 * n + col);
                        const unsigned rin[4] = {rb.x & 0xFFFFu, rb.x >> 16, rb.y & 0xFFFFu,
                                                 rb.y >> 16};
                        unsigned yb[4], xb[4];
                        #pragma unroll
                        for (int e = 0; e < 4; e++) {
                            float y = bf16_float(rin[e]) + gl[col + e] * sum[e];
                            yb[e] = row < VROWS ? bf16_bits(y) : 0u;
                            const float yr = bf16_float(yb[e]);
                            ss += yr * yr;
                            xb[e] = bf16_bits(yr * sc[col + e]);
                        }
                        *(uint2*)(res_nxt + (long long)row * WIDTH + 64 * n + col) =
                            make_uint2(yb[0] | (yb[1] << 16), yb[2] | (yb[3] << 16));
                        *(uint2*)(xs_nxt + packed(row, 64 * n + col)) =
                            make_uint2(xb[0] | (xb[1] << 16), xb[2] | (xb[3] << 16));
                    }
                    ss += __shfl_xor_sync(0xFFFFFFFFu, ss, 1);
                    if ((tid & 1) == 0) ssq[((long long)(cur ^ 1) * NT_B + n) * 64 + row] = ss;
                    if (tid == 0) count[n] = 0;
                }
            }
            // this phase's stores are read by the next one's bulk copies (the async proxy)
            asm volatile("fence.proxy.async.global;" ::: "memory");
            grid_sync(bar);
        }
    }
}
'''


def source(nbuf: int) -> str:
    """The CUDA source of `mlp_chain` with a weight ring of `nbuf` tiles."""
    values = {'NBUF': nbuf, 'KA': KA, 'KB': KB, 'NT_B': NT_B, 'SPLITS': SPLITS, 'WIDTH': WIDTH,
              'ROWS': ROWS, 'EPS': f'{EPS:.1e}f', 'MMA_TILE': mma_tile_source(64)}
    text = SOURCE
    for key, value in values.items():
        text = text.replace(f'__{key}__', str(value))
    return text


RINGS = (4, 8)  # weight tiles in flight per block, timed
SHARED = {nbuf: (KA + nbuf) * TILE for nbuf in RINGS}


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


def chain_section(state: dict, nbuf: int) -> dict:
    """mlp_chain with a ring of `nbuf` weight tiles: error, padding, determinism, time."""
    from lamp_ros.kernels import tuning
    inputs, want = state['inputs'], state['want']
    kernel = torch.cuda._compile_kernel(source(nbuf), 'mlp_chain', compute_capability='90a')
    kernel.set_shared_memory_config(SHARED[nbuf])
    bufs = {'xs1': torch.zeros_like(inputs['xs0']), 'res1': torch.zeros_like(inputs['res0']),
            'h': torch.zeros(PAD * MLP * 2, dtype=torch.uint8, device='cuda'),
            'part': torch.zeros(SPLITS * NT_B * 64 * 64, device='cuda'),
            'count': torch.zeros(NT_B, dtype=torch.int32, device='cuda'),
            'bar': torch.zeros(64, dtype=torch.int32, device='cuda')}
    xs0, res0, ssq = (inputs[k].clone() for k in ('xs0', 'res0', 'ssq'))

    def launch(fresh: bool = True):
        """fresh: from layer 0's inputs; else on from where the last run ended (the buffers
        then hold layer L's state, as consistent as layer 0's)."""
        if fresh:
            xs0.copy_(inputs['xs0'])
            res0.copy_(inputs['res0'])
            ssq.copy_(inputs['ssq'])
        kernel(grid=(BLOCKS, 1, 1), block=(128, 1, 1), shared_mem=SHARED[nbuf],
               args=[state['weights'], xs0, bufs['xs1'], res0, bufs['res1'], bufs['h'],
                     bufs['part'], bufs['count'], ssq, inputs['bias'], inputs['scale'],
                     inputs['gate'], bufs['bar'], LAYERS])
    launch()
    torch.cuda.synchronize()
    out = res0 if LAYERS % 2 == 0 else bufs['res1']  # layer l writes buffer (l + 1) % 2
    first = out.clone()
    launch()
    torch.cuda.synchronize()
    row = {'rel_error': float((first[:ROWS].float() - want).norm() / want.norm()),
           'padding_rows_zero': bool((first[ROWS:] == 0).all()),
           'deterministic': bool(torch.equal(first, out)), 'shared_bytes': SHARED[nbuf]}
    us = tuning.gpu_time_ms(lambda: launch(False)) * 1e3 / LAYERS
    return {**row, 'us_per_layer': round(us, 2),
            'TBps': round(3 * MLP * WIDTH * 2 / (us * 1e-6) / 1e12, 2)}


def main():
    state = {}
    sections = [('shape', lambda: setup(state)),
                ('torch ops, one CUDA graph', lambda: torch_ops_section(state))]
    sections += [(f'mlp_chain ring {nbuf}', lambda nbuf=nbuf: chain_section(state, nbuf))
                 for nbuf in RINGS]
    report = run_sections(__doc__.splitlines()[0], 'mlp_chain_probe.json', sections)
    print(json.dumps(report, indent=1))


if __name__ == '__main__':
    main()
