"""How fast can one SM take data in from global memory into shared memory, and by which path?

attention_cluster_probe.py found the expert attention's blocks spending ~7.7 us taking in
170-210 KB each (about 25 GB/s into an SM, cp.async 16 bytes a thread), and 512-byte bulk copies
slower still to issue. Before an attention or a persistent expert is designed around an ingest
rate, this measures it alone: every block of a launch copies `kb` KB of its own region into
shared memory and stamps %globaltimer before and after; the report gives the median block's
GB/s (per SM) and the launch's aggregate rate, for

- paths: `cp.async` (16 bytes a thread a copy, a commit group per round, all waited at the end),
  `ld.v4` (16-byte loads into registers, four rounds in flight, stored to shared memory), `bulk`
  (1-D bulk copies of 8 KB issued by one thread through a ring of 8 mbarriers);
- 56 or 132 blocks (one per SM: 227 KB of shared memory a block), 128 or 256 threads;
- 64 or 192 KB a block; data hot in L2 (the same launch run just before) or cold (a 256 MB
  buffer written between launches).

    python3 scripts/device/ingest_probe.py [--out FILE.json]

Measured on the H200 (2026-12-01, bench/results/ingest_probe_h200.json; %globaltimer steps of
about 0.25 us, so short blocks are coarse): from L2, cp.async and 8 KB bulk copies take in
51-64 GB/s an SM with 128 threads (56 or 132 blocks), 85-96 with 256 threads on 56 blocks, the
aggregate 5.6-7.8 TB/s over 132 blocks; from HBM 18-45 GB/s an SM, 2.1-2.7 TB/s over 132 blocks
(a 64-192 KB burst does not reach HBM's rate). Loads through registers (ld.v4, four rounds in
flight) are slower on every case (11-64 GB/s). So the attention probe's blocks (about 25 GB/s
while they issued copies between address arithmetic) took in at half of what an SM can: a
kernel that streams K/V should issue its copies from a tight loop or as bulk copies of 8 KB
or more, and every 64 KB a block takes in costs it at least ~1 us from L2 (3 from HBM).
"""

import argparse
import itertools
import json
from dataclasses import dataclass

import torch

PATHS = ('cp.async', 'ld.v4', 'bulk')
BULK_BYTES, RING = 8192, 8
SHARED = 192 * 1024  # the ring every path writes into (wrapping): ingest only, nothing is used


@dataclass(frozen=True)
class Case:
    path: str
    blocks: int
    threads: int
    kb: int
    hot: bool

    @property
    def name(self) -> str:
        return (f'{self.path}, {self.blocks} blocks x {self.threads} threads, {self.kb} KB, '
                f'{"L2" if self.hot else "HBM"}')


CASES = [Case(p, b, t, kb, hot) for p, b, t, kb, hot in itertools.product(
    PATHS, (56, 132), (128, 256), (64, 192), (True, False))]


def source() -> str:
    """The CUDA C++ of `ingest` (NVRTC, sm_90a)."""
    from bench.hopper_ptx import HELPERS
    return HELPERS + KERNEL


KERNEL = r'''
#define SHARED ''' + str(SHARED) + r'''
#define BULK_BYTES ''' + str(BULK_BYTES) + r'''
#define RING ''' + str(RING) + r'''
__device__ __forceinline__ unsigned long long now() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
// Block b copies `bytes` from src + b * bytes into its shared memory (a ring of SHARED bytes)
// by `path` (0 cp.async, 1 ld.v4, 2 bulk), stamping the start and the end.
extern "C" __global__ void ingest(const unsigned char* __restrict__ src,
                                  unsigned long long* stamps, int bytes, int path) {
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) unsigned long long bars[RING];
    const unsigned char* from = src + (long)blockIdx.x * bytes;
    if (path == 2 && threadIdx.x == 0) {
        for (int i = 0; i < RING; i++)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_addr(&bars[i])));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    const unsigned long long t0 = now();
    if (path == 0) {
        for (int at = threadIdx.x * 16; at < bytes; at += blockDim.x * 16) {
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"
                         :: "r"(smem_addr(smem + at % SHARED)), "l"(from + at) : "memory");
            asm volatile("cp.async.commit_group;" ::: "memory");
        }
        asm volatile("cp.async.wait_group 0;" ::: "memory");
    } else if (path == 1) {
        const int step = blockDim.x * 16;
        int at = threadIdx.x * 16;
        for (; at + 3 * step < bytes; at += 4 * step) {
            uint4 v[4];
            #pragma unroll
            for (int u = 0; u < 4; u++) v[u] = *(const uint4*)(from + at + u * step);
            #pragma unroll
            for (int u = 0; u < 4; u++) *(uint4*)(smem + (at + u * step) % SHARED) = v[u];
        }
        for (; at < bytes; at += step) *(uint4*)(smem + at % SHARED) = *(const uint4*)(from + at);
    } else if (threadIdx.x == 0) {
        const int copies = bytes / BULK_BYTES;
        for (int i = 0; i < copies; i++) {
            const int slot = i % RING;
            if (i >= RING) wait_phase(smem_addr(&bars[slot]), ((i / RING) - 1) & 1);
            expect_bytes(smem_addr(&bars[slot]), BULK_BYTES);
            bulk_copy_to(smem + (i * BULK_BYTES) % SHARED, from + (long)i * BULK_BYTES,
                         BULK_BYTES, smem_addr(&bars[slot]));
        }
        for (int i = max(copies - RING, 0); i < copies; i++)
            wait_phase(smem_addr(&bars[i % RING]), (i / RING) & 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        stamps[2 * blockIdx.x] = t0;
        stamps[2 * blockIdx.x + 1] = now();
    }
}
'''


def summarize(stamps: torch.Tensor, blocks: int, kb: int) -> dict:
    """Stamps (2 per block, ns) -> the median block's duration and GB/s, and the launch's
    aggregate GB/s (all blocks' bytes over the first start to the last end)."""
    t = stamps[:2 * blocks].view(blocks, 2).double()
    took = (t[:, 1] - t[:, 0]).median().item()
    span = (t[:, 1].max() - t[:, 0].min()).item()
    size = kb * 1024
    return {'block_us': round(took / 1e3, 2), 'gb_s_per_sm': round(size / took, 1),
            'aggregate_tb_s': round(size * blocks / span / 1e3, 2)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--out', default='ingest_probe.json')
    args = parser.parse_args()
    kernel = torch.cuda._compile_kernel(source(), 'ingest', compute_capability='90a')
    kernel.set_shared_memory_config(SHARED)
    src = torch.randint(0, 255, (132 * 192 * 1024,), dtype=torch.uint8, device='cuda')
    flush = torch.empty(256 << 20, dtype=torch.uint8, device='cuda')
    stamps = torch.zeros(2 * 132, dtype=torch.int64, device='cuda')
    report = {'gpu': torch.cuda.get_device_name(), 'cases': {}}
    for case in CASES:
        launch = dict(grid=(case.blocks, 1, 1), block=(case.threads, 1, 1), shared_mem=SHARED,
                      args=[src, stamps, case.kb * 1024, PATHS.index(case.path)])
        runs = []
        for _ in range(5):
            if case.hot:
                kernel(**launch)  # the same regions just read: in L2
            else:
                flush.fill_(1)  # 256 MB through the 50 MB L2
            kernel(**launch)
            torch.cuda.synchronize()
            runs.append(summarize(stamps.cpu(), case.blocks, case.kb))
        median = sorted(runs, key=lambda r: r['block_us'])[len(runs) // 2]
        report['cases'][case.name] = median
        print(case.name, json.dumps(median), flush=True)
    with open(args.out, 'w', encoding='utf-8') as f:
        json.dump(report, f, indent=1)


if __name__ == '__main__':
    main()
