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

And, in a second kernel (`ingest_tensor`), the copies a persistent attention would make of the
prefix's K/V: 2-D tensor-map (TMA) copies of 512-byte rows lying 5 KB apart, as the prefix's
q/k/v GEMM leaves them, one instruction a box of 64 rows (32 KB) or 16 rows (8 KB) from one
thread; and the same boxes multicast to clusters of 2 or 4 blocks that share one region (as an
attention's row blocks share its keys), so that every block lands the whole region while L2 is
read once a cluster (`l2_read_tb_s`). Each of these cases checks that the first cluster's
blocks landed their region bit for bit (`landed_exact`). The question: do few large copies
take in faster than cp.async or 8 KB 1-D copies, and does multicast lift an SM's intake past
its share of L2 (the attention probe's blocks each took in all of K/V again)?

    python3 scripts/device/ingest_probe.py [--out FILE.json] [--paths tensor]

Measured on the H200 (2026-12-01, bench/results/ingest_probe_h200.json; %globaltimer steps of
about 0.25 us, so short blocks are coarse): from L2, cp.async and 8 KB bulk copies take in
51-64 GB/s an SM with 128 threads (56 or 132 blocks), 85-96 with 256 threads on 56 blocks, the
aggregate 5.6-7.8 TB/s over 132 blocks; from HBM 18-45 GB/s an SM, 2.1-2.7 TB/s over 132 blocks
(a 64-192 KB burst does not reach HBM's rate). Loads through registers (ld.v4, four rounds in
flight) are slower on every case (11-64 GB/s). So the attention probe's blocks (about 25 GB/s
while they issued copies between address arithmetic) took in at half of what an SM can: a
kernel that streams K/V should issue its copies from a tight loop or as bulk copies of 8 KB
or more, and every 64 KB a block takes in costs it at least ~1 us from L2 (3 from HBM).
The tensor-map cases compile offline (test_offline_cuda.py) and have not run on the device yet:
the call that would have run them (2026-12-01) found no machine lent.
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

# 2-D tensor-map copies of K/V-like rows: 256 bf16 (512 bytes) a row, rows PITCH bytes apart
# as the prefix's K and V lie in its q/k/v GEMM's output ((8 + 2) heads x 256 x 2 bytes), in
# boxes of `box_rows` rows issued by one thread; with `cluster` > 1 the blocks of a cluster share
# one region (as the row blocks of an attention share its keys), each issuing every cluster-th
# box multicast to all of them: every block still lands the whole region, L2 is read once a
# cluster. path -> (box rows, cluster)
ROW_BYTES, PITCH, MAX_BOXES = 512, 5120, 24
TENSOR_PATHS = {'tensor 32 KB': (64, 1), 'tensor 8 KB': (16, 1),
                'tensor 32 KB multicast x2': (64, 2), 'tensor 32 KB multicast x4': (64, 4)}
TENSOR_CASES = [Case(p, b, 128, kb, hot) for p, b, kb, hot in itertools.product(
    TENSOR_PATHS, (56, 128), (64, 192), (True, False))]


def tensor_layout(case: Case) -> dict:
    """Rows a block lands, its boxes, and the rows the launch reads (its regions)."""
    box_rows, cluster = TENSOR_PATHS[case.path]
    rows = case.kb * 1024 // ROW_BYTES
    if rows % box_rows or rows // box_rows > MAX_BOXES or case.blocks % cluster:
        raise ValueError(f'{case.name}: {rows} rows in boxes of {box_rows}, {case.blocks} '
                         f'blocks in clusters of {cluster}')
    return {'rows': rows, 'box_rows': box_rows, 'boxes': rows // box_rows, 'cluster': cluster,
            'matrix_rows': rows * case.blocks // cluster}


def source() -> str:
    """The CUDA C++ of `ingest` (NVRTC, sm_90a)."""
    from bench.hopper_ptx import HELPERS
    return HELPERS + NOW + KERNEL


def tensor_source() -> str:
    """The CUDA C++ of `ingest_tensor` (NVRTC, sm_90a)."""
    from bench.hopper_ptx import CLUSTER, HELPERS, TENSOR_COPY
    return HELPERS + CLUSTER + TENSOR_COPY + NOW + TENSOR_KERNEL


NOW = r'''
__device__ __forceinline__ unsigned long long now() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
'''

KERNEL = r'''
#define SHARED ''' + str(SHARED) + r'''
#define BULK_BYTES ''' + str(BULK_BYTES) + r'''
#define RING ''' + str(RING) + r'''
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


TENSOR_KERNEL = r'''
#define MAX_BOXES ''' + str(MAX_BOXES) + r'''
#define ROW_BYTES ''' + str(ROW_BYTES) + r'''
// Block b lands `rows` rows of the map's matrix (its cluster's region: rows from
// (b / cluster) * rows on) in its shared memory as boxes of `box_rows`, one mbarrier a box (no
// ring: nothing is reused, so multicast copies from other blocks cannot meet a reused barrier),
// stamping the start and the end. Thread 0 arms every barrier, then issues the boxes of its
// rank in the cluster (all of them when cluster == 1), multicast to the whole cluster. The
// first cluster's blocks then write what landed to `check` (after the stamps).
extern "C" __global__ void ingest_tensor(const __grid_constant__ TensorMap map,
                                         unsigned long long* stamps, int rows, int box_rows,
                                         int cluster, unsigned char* check) {
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) unsigned long long bars[MAX_BOXES];
    const int boxes = rows / box_rows;
    const unsigned box_bytes = box_rows * ROW_BYTES;
    const unsigned rank = cluster_rank();
    const int first = (blockIdx.x / cluster) * rows;
    if (threadIdx.x == 0) {
        for (int i = 0; i < boxes; i++)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_addr(&bars[i])));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    cluster_sync();  // every block's barriers exist before any copy lands on them
    const unsigned long long t0 = now();
    if (threadIdx.x == 0) {
        for (int i = 0; i < boxes; i++) expect_bytes(smem_addr(&bars[i]), box_bytes);
        for (int i = rank; i < boxes; i += cluster) {
            if (cluster > 1)
                tensor_copy_2d_multicast(smem + i * box_bytes, &map, 0, first + i * box_rows,
                                         smem_addr(&bars[i]),
                                         (unsigned short)((1u << cluster) - 1));
            else
                tensor_copy_2d(smem + i * box_bytes, &map, 0, first + i * box_rows,
                               smem_addr(&bars[i]));
        }
    }
    for (int i = 0; i < boxes; i++) wait_or_trap(smem_addr(&bars[i]), 0);
    __syncthreads();
    if (threadIdx.x == 0) {
        stamps[2 * blockIdx.x] = t0;
        stamps[2 * blockIdx.x + 1] = now();
    }
    if (blockIdx.x < cluster)  // the first cluster's blocks: what landed, for the host to check
        for (int at = threadIdx.x * 16; at < rows * ROW_BYTES; at += blockDim.x * 16)
            *(uint4*)(check + (long)blockIdx.x * rows * ROW_BYTES + at) =
                *(const uint4*)(smem + at);
    cluster_sync();  // no block leaves while a copy it issued may still land elsewhere
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


def landed_exact(check: torch.Tensor, matrix: torch.Tensor, layout: dict) -> bool:
    """Whether each block of the first cluster landed its region (the matrix's first rows) bit
    for bit, from the bytes the kernel wrote back."""
    size = layout['rows'] * ROW_BYTES
    want = matrix[:layout['rows']].contiguous().view(torch.uint8).reshape(-1)
    return all(torch.equal(check[b * size:(b + 1) * size], want)
               for b in range(layout['cluster']))


def time_case(case: Case, launch, stamps, flush, l2_share: int = 1) -> dict:
    """The median of 5 runs of `launch()` (after the same launch, so its data is in L2, or
    after 256 MB written through the 50 MB L2); l2_share > 1: the blocks of a cluster read each
    byte once between them, so L2 gave out aggregate / l2_share."""
    runs = []
    for _ in range(5):
        if case.hot:
            launch()  # the same regions just read: in L2
        else:
            flush.fill_(1)
        launch()
        torch.cuda.synchronize()
        runs.append(summarize(stamps.cpu(), case.blocks, case.kb))
    median = sorted(runs, key=lambda r: r['block_us'])[len(runs) // 2]
    if l2_share > 1:
        median['l2_read_tb_s'] = round(median['aggregate_tb_s'] / l2_share, 2)
    print(case.name, json.dumps(median), flush=True)
    return median


def main():
    from bench.hopper_ptx import encode_tensor_map, launch_cluster
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--out', default='ingest_probe.json')
    parser.add_argument('--paths', default='all', help="'tensor': the tensor-map cases only")
    args = parser.parse_args()
    kernel = torch.cuda._compile_kernel(source(), 'ingest', compute_capability='90a')
    kernel.set_shared_memory_config(SHARED)
    tensor_kernel = torch.cuda._compile_kernel(tensor_source(), 'ingest_tensor',
                                               compute_capability='90a')
    tensor_kernel.set_shared_memory_config(SHARED)
    src = torch.randint(0, 255, (132 * 192 * 1024,), dtype=torch.uint8, device='cuda')
    flush = torch.empty(256 << 20, dtype=torch.uint8, device='cuda')
    stamps = torch.zeros(2 * 132, dtype=torch.int64, device='cuda')
    report = {'gpu': torch.cuda.get_device_name(), 'cases': {}}
    for case in CASES if args.paths == 'all' else []:
        launch = dict(grid=(case.blocks, 1, 1), block=(case.threads, 1, 1), shared_mem=SHARED,
                      args=[src, stamps, case.kb * 1024, PATHS.index(case.path)])
        report['cases'][case.name] = time_case(case, lambda: kernel(**launch), stamps, flush)
    width = PITCH // 2  # bf16 elements from one row to the next
    rows = torch.randn(max(tensor_layout(c)['matrix_rows'] for c in TENSOR_CASES), width,
                       device='cuda').to(torch.bfloat16)
    check = torch.empty(4 * SHARED, dtype=torch.uint8, device='cuda')
    for case in TENSOR_CASES:
        layout = tensor_layout(case)
        matrix = rows[:layout['matrix_rows'], :ROW_BYTES // 2]  # 512-byte rows, PITCH apart
        tensor_map = encode_tensor_map(matrix, layout['box_rows'], ROW_BYTES // 2)
        check.zero_()
        call = [tensor_map, stamps, layout['rows'], layout['box_rows'], layout['cluster'],
                check]
        report['cases'][case.name] = time_case(case, lambda: launch_cluster(
            tensor_kernel, (case.blocks, 1, 1), (case.threads, 1, 1), call, SHARED,
            layout['cluster']), stamps, flush, layout['cluster'])
        report['cases'][case.name]['landed_exact'] = landed_exact(check, matrix, layout)
    with open(args.out, 'w', encoding='utf-8') as f:
        json.dump(report, f, indent=1)


if __name__ == '__main__':
    main()
