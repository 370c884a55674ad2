"""Do Hopper's own instructions work through NVRTC here (torch.cuda._compile_kernel, no nvcc)?

The persistent-chain probe (persistent_chain_probe.py) ended at: a persistent expert needs bulk
copies (TMA: one instruction per tile, completion counted by an mbarrier) and wgmma, not 16-byte
cp.async and mma.sync. Before anyone writes that kernel, this checks the toolchain can build and
run such instructions for sm_90a at run time, inside a CUDA graph:

- mbarrier init / arrive.expect_tx / try_wait.parity, and a 1-D `cp.async.bulk` of a weight
  tile (global -> shared, completion counted in bytes by the mbarrier), copied back out and
  compared bit for bit;
- the warpgroup MMA fence / commit / wait sequence (wgmma.*), which needs the sm_90a target;
- the same launch captured and replayed in a CUDA graph, and its time for a 200-tile stream per
  block (8 KB bulk copies through 2, 4 or 8 buffers, one fewer in flight, one thread issuing
  them: what a producer warp of a persistent expert would do).

    python3 scripts/device/nvrtc_hopper_check.py [--out FILE.json]

Measured on the H200 (2026-12-01, bench/results/nvrtc_hopper_check_h200.json): it compiles for
sm_90a, the tiles arrive bit for bit, also replayed from a CUDA graph, and one thread per SM
issuing 8 KB bulk copies streams 216 MB at 2.8 TB/s with a ring of 2, 3.9 with 4 and 4.2 with 8
(the HBM rate the expert's weights need: 34.6 MB a layer-step in 8.2 us), against 0.54-0.61 TB/s
for the 16-byte cp.async ring of persistent_chain_probe.py, which was bound by issuing them.
"""

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.getcwd())
from bench.hopper_ptx import HELPERS  # noqa: E402
from lamp_ros.kernels import tuning  # noqa: E402

SOURCE = r'''
#define NBUF __NBUF__
''' + HELPERS + r'''
__device__ __forceinline__ void bulk_copy(unsigned char* to, const unsigned char* from,
                                          unsigned bytes, unsigned bar) {
    expect_bytes(bar, bytes);
    bulk_copy_to(to, from, bytes, bar);
}

// Each block streams `tiles` tiles of TILE bytes (its own slice of src) through NBUF shared
// buffers by bulk copies (the next NBUF - 1 issued ahead of the one it waits for), and writes
// the last two tiles it got to dst.
extern "C" __global__ void __launch_bounds__(128, 1)
bulk_stream(const unsigned char* src, unsigned char* dst, int tiles) {
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) u64 bars[NBUF];
    const int TILE = 8192;
    if (threadIdx.x == 0) {
        for (int b = 0; b < NBUF; b++)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_addr(&bars[b])));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    const unsigned char* mine = src + (long long)blockIdx.x * tiles * TILE;
    unsigned phases = 0;  // bit b: the parity buffer b's barrier completes next
    if (threadIdx.x == 0)
        for (int i = 0; i < NBUF - 1 && i < tiles; i++)
            bulk_copy(smem + i * TILE, mine + (long long)i * TILE, TILE, smem_addr(&bars[i]));
    for (int i = 0; i < tiles; i++) {
        int buf = i % NBUF, ahead = i + NBUF - 1;
        // refill the buffer read in the step before (everyone synced since)
        if (threadIdx.x == 0 && ahead < tiles)
            bulk_copy(smem + (ahead % NBUF) * TILE, mine + (long long)ahead * TILE, TILE,
                      smem_addr(&bars[ahead % NBUF]));
        wait_phase(smem_addr(&bars[buf]), (phases >> buf) & 1u);
        phases ^= 1u << buf;
        if (i >= tiles - 2) {  // the last two tiles go back out, for the bit-for-bit check
            const uint4* s = (const uint4*)(smem + buf * TILE);
            uint4* d = (uint4*)(dst + ((long long)blockIdx.x * 2 + (i - (tiles - 2))) * TILE);
            for (int j = threadIdx.x; j < TILE / 16; j += blockDim.x) d[j] = s[j];
        }
        __syncthreads();  // everyone is done reading this buffer before it is refilled
    }
    // the warpgroup MMA ordering instructions (sm_90a): fence, an empty group, wait for it
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
}
'''

TILE = 8192
RINGS = (2, 4, 8)  # bulk copies in flight per SM, timed


def bulk_source(nbuf: int) -> str:
    """The CUDA source of `bulk_stream` with a ring of `nbuf` tiles, as this probe compiles it."""
    return SOURCE.replace('__NBUF__', str(nbuf))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--out', default='nvrtc_hopper_check.json')
    args = parser.parse_args()
    report = {'gpu': torch.cuda.get_device_name(), 'torch': torch.__version__}
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    tiles = 200
    src = torch.randint(0, 256, (sms * tiles * TILE,), dtype=torch.uint8, device='cuda')
    want = src.view(sms, tiles, TILE)[:, -2:].reshape(-1)
    for nbuf in RINGS:
        row = {}
        try:
            kernel = torch.cuda._compile_kernel(bulk_source(nbuf), 'bulk_stream',
                                                compute_capability='90a')
            kernel.set_shared_memory_config(nbuf * TILE)
            dst = torch.zeros(sms * 2 * TILE, dtype=torch.uint8, device='cuda')

            def launch():
                kernel(grid=(sms, 1, 1), block=(128, 1, 1), args=[src, dst, tiles],
                       shared_mem=nbuf * TILE)
            launch()
            torch.cuda.synchronize()
            row['bulk_copy_bit_exact'] = bool(torch.equal(dst, want))
            dst.zero_()
            ms = tuning.gpu_time_ms(launch)  # replayed from a CUDA graph
            row['graph_replay_bit_exact'] = bool(torch.equal(dst, want))
            row['stream_us'] = round(ms * 1e3, 2)
            row['stream_TBps'] = round(src.numel() / (ms * 1e-3) / 1e12, 2)
        except Exception as exc:
            row['failed'] = f'{type(exc).__name__}: {str(exc)[-600:]}'
        report[f'ring of {nbuf} x 8 KB per SM'] = row
    report['compiled_for'] = 'sm_90a'
    print(json.dumps(report, indent=1), flush=True)
    with open(args.out, 'w', encoding='utf-8') as f:
        json.dump(report, f, indent=1)


if __name__ == '__main__':
    main()
