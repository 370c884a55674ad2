"""CUDA C++ helpers of the NVRTC probes for sm_90a (scripts/device/nvrtc_hopper_check.py,
wgmma_check.py, persistent_chain_probe.py, mlp_chain_probe.py, the attention and ingest
probes): the inline PTX a persistent expert would be built from, written once, and the host
packing its wgmma descriptors read. Prepend `HELPERS` to a kernel's source; the other pieces
(`CLUSTER`, `CLUSTER_MERGE`, `TENSOR_COPY`, `BF16_BITS`, `GRID_SYNC`, `LOAD_CG`,
`LAST_TO_ARRIVE`, `mma_tile_source`, `wgmma_asm`) go where a kernel needs them;
`encode_tensor_map` makes the tensor maps TENSOR_COPY reads, `launch_cluster` and
`launch_cooperative` launch with the attributes the probes need."""

import ctypes

import torch

HELPERS = r'''
typedef unsigned long long u64;

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    unsigned r;
    asm volatile("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }"
                 : "=r"(r) : "l"(p));
    return r;
}
// whether the mbarrier at shared address `bar` has completed the phase of parity `phase`
__device__ __forceinline__ unsigned try_wait(unsigned bar, unsigned phase) {
    unsigned done;
    asm volatile("{ .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 " selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(bar), "r"(phase) : "memory");
    return done;
}
// spin until it has
__device__ __forceinline__ void wait_phase(unsigned bar, unsigned phase) {
    while (!try_wait(bar, phase)) { }
}
// wait_phase that gives up: a copy that never lands (a wrong byte count) traps after a second
// instead of hanging the device call; the launch then fails with an error the report records
__device__ __forceinline__ void wait_or_trap(unsigned bar, unsigned phase) {
    unsigned long long start, now_;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    while (!try_wait(bar, phase)) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now_));
        if (now_ - start > 1000000000ull) asm volatile("trap;");
    }
}
// a 1-D bulk copy global -> shared whose bytes complete on the mbarrier `bar` (the caller
// announces them with mbarrier.arrive.expect_tx)
__device__ __forceinline__ void bulk_copy_to(unsigned char* to, const unsigned char* from,
                                             unsigned bytes, unsigned bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1], %2, [%3];"
                 :: "r"(smem_addr(to)), "l"(from), "r"(bytes), "r"(bar) : "memory");
}
__device__ __forceinline__ void expect_bytes(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                 :: "r"(bar), "r"(bytes) : "memory");
}
// shared memory matrix descriptor of wgmma, no swizzle: addresses and offsets in 16-byte units
__device__ __forceinline__ u64 descriptor(unsigned addr, unsigned lbo, unsigned sbo) {
    return (u64)((addr & 0x3FFFF) >> 4) | ((u64)((lbo & 0x3FFFF) >> 4) << 16)
        | ((u64)((sbo & 0x3FFFF) >> 4) << 32);
}
'''

# a block's rank in its thread-block cluster, and the cluster-wide barrier
CLUSTER = r'''__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
// every thread of every block of the cluster; orders shared-memory stores before remote reads
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n"
                 "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// the address of `p` (this block's shared memory) in block `rank`'s shared memory
__device__ __forceinline__ unsigned remote(const void* p, unsigned rank) {
    unsigned r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(smem_addr(p)), "r"(rank));
    return r;
}
__device__ __forceinline__ float ld_remote(unsigned addr) {
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
    return v;
}
__device__ __forceinline__ float4 ld_remote4(unsigned addr) {
    float4 v;
    asm volatile("ld.shared::cluster.v4.f32 {%0,%1,%2,%3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(addr) : "memory");
    return v;
}'''

# Key splits of an attention meeting in a thread-block cluster of CL_ blocks, each holding for
# its rows the max m_s and sum l_s (log2 units) of its keys and a partial output. Needs CLUSTER
# and BF16_BITS. cluster_row_weight: the factor of this block's partial for a row (its max m),
# exp2(m - M) / sum_s l_s exp2(m_s - M) with M the cluster's max, read through distributed
# shared memory once m_s / l_s are stored and the cluster has synced (every remote value is
# loaded before any is used: one round trip, not one a block). cluster_sum_columns: once
# every block's weighted partial o_s (rows x os float32) is stored and the cluster has synced,
# this block sums its column slice (d / CL_ columns) of every row over the cluster into bf16
# rows of `out` (d wide; rows from `valid` on are not stored).
CLUSTER_MERGE = r'''template <int CL_>
__device__ __forceinline__ float cluster_row_weight(const float* m_s, const float* l_s, int row,
                                                    float m) {
    float ms[CL_], ls[CL_];  // every remote value first: one round trip, not one a block
    #pragma unroll
    for (int s = 0; s < CL_; s++) {
        ms[s] = ld_remote(remote(&m_s[row], s));
        ls[s] = ld_remote(remote(&l_s[row], s));
    }
    float big = -__int_as_float(0x7f800000);
    #pragma unroll
    for (int s = 0; s < CL_; s++) big = fmaxf(big, ms[s]);
    float sum = 0.f;
    #pragma unroll
    for (int s = 0; s < CL_; s++) sum += ls[s] * exp2f(ms[s] - big);
    return exp2f(m - big) / sum;
}
template <int CL_, int ROWS_, int D_, int THREADS_>
__device__ __forceinline__ void cluster_sum_columns(const float* o_s, int os, unsigned rank,
                                                    unsigned short* out, int valid, int tid) {
    constexpr int COLS = D_ / CL_, ITEMS = (ROWS_ * COLS / 4 + THREADS_ - 1) / THREADS_;
    float4 acc[ITEMS];  // all of a thread's remote loads are issued before any store
    #pragma unroll
    for (int u = 0; u < ITEMS; u++) {
        const int i = tid + u * THREADS_, r = i / (COLS / 4);
        const int col = rank * COLS + (i % (COLS / 4)) * 4;
        acc[u] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (i < ROWS_ * COLS / 4) {
            #pragma unroll
            for (int s = 0; s < CL_; s++) {
                const float4 v = ld_remote4(remote(&o_s[r * os + col], s));
                acc[u].x += v.x; acc[u].y += v.y; acc[u].z += v.z; acc[u].w += v.w;
            }
        }
    }
    #pragma unroll
    for (int u = 0; u < ITEMS; u++) {
        const int i = tid + u * THREADS_, r = i / (COLS / 4);
        const int col = rank * COLS + (i % (COLS / 4)) * 4;
        if (i < ROWS_ * COLS / 4 && r < valid)
            *(uint2*)(out + (long)r * D_ + col) = make_uint2(pack2(acc[u].x, acc[u].y),
                                                             pack2(acc[u].z, acc[u].w));
    }
}'''

# 2-D tensor-map (TMA) copies global -> shared: the map (a CUtensorMap made on the host by
# encode_tensor_map, passed by value as a __grid_constant__ kernel argument) names the matrix,
# its row stride and the box; one instruction copies a whole box to `to`, its bytes completing on
# the mbarrier `bar`. The multicast form lands the box at the same offset in the shared memory of
# every block of the cluster in `ctas` (a bit a block), and completes on each one's `bar`.
TENSOR_COPY = r'''struct __align__(64) TensorMap { unsigned long long words[16]; };
__device__ __forceinline__ void tensor_copy_2d(void* to, const TensorMap* map, int x, int y,
                                               unsigned bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];"
                 :: "r"(smem_addr(to)), "l"(map), "r"(x), "r"(y), "r"(bar) : "memory");
}
__device__ __forceinline__ void tensor_copy_2d_multicast(void* to, const TensorMap* map, int x,
                                                         int y, unsigned bar,
                                                         unsigned short ctas) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 ".multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;"
                 :: "r"(smem_addr(to)), "l"(map), "r"(x), "r"(y), "r"(bar), "h"(ctas)
                 : "memory");
}'''

# float -> bf16 bits, round to nearest even (no cuda_bf16.h under NVRTC here)
BF16_BITS = r'''__device__ __forceinline__ unsigned bf16_bits(float f) {  // round to nearest even
    unsigned u = __float_as_uint(f);
    return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
}
__device__ __forceinline__ unsigned pack2(float lo, float hi) {  // two bf16 in one word
    return bf16_bits(lo) | (bf16_bits(hi) << 16);
}'''

# a grid-wide barrier inside a persistent kernel (every block resident): one arrival counter,
# a generation word on its own cache line; 1.08 us on the H200 (sync_cost.py)
GRID_SYNC = r'''__device__ void grid_sync(unsigned* bar) {
    __syncthreads();
    if (threadIdx.x == 0) {
        volatile unsigned* gen = bar + 32;  // its own 128-byte line: spinning readers of the
                                            // generation do not queue behind the arrivals
        unsigned mine = *gen;
        __threadfence();
        if (atomicAdd(bar, 1u) == gridDim.x - 1) {
            bar[0] = 0;
            __threadfence();
            atomicAdd(bar + 32, 1u);
        } else {
            while (*gen == mine) { }
        }
        __threadfence();
    }
    __syncthreads();
}'''

# 16-byte loads through L2 only (ld.global.cg): data other blocks of the same kernel wrote
# before a grid barrier, which a stale L1 line must not hide
LOAD_CG = r'''__device__ __forceinline__ uint4 ld_cg4(const void* p) {
    uint4 v;
    asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
__device__ __forceinline__ float4 ld_cg4f(const float* p) {
    float4 v;
    asm volatile("ld.global.cg.v4.f32 {%0,%1,%2,%3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
    return v;
}'''

# The block that counts in last at `counter` (of `expected`): true in all its threads, and it
# then sees the others' stores. One thread orders the block's stores (after the CTA barrier)
# before its count and acquires the others' for the block, as cooperative groups' grid barrier.
LAST_TO_ARRIVE = r'''__device__ __forceinline__ bool last_to_arrive(int* counter, int expected) {
    __shared__ int last;
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("fence.acq_rel.gpu;" ::: "memory");
        last = atomicAdd(counter, 1) == expected - 1;
        if (last) asm volatile("fence.acq_rel.gpu;" ::: "memory");
    }
    __syncthreads();
    return last;
}'''


def mma_tile_source(n: int = 64) -> str:
    """`mma_tile(d, a, b)`: d (64 x n, float32 fragments) += A @ B^T over one 64-wide K tile,
    A (64 rows) and B (n rows) tiles in shared memory as pack_tiles lays them out (LBO 128, SBO
    1024), as four m64nNk16 wgmma committed as one group."""
    return r'''__device__ __forceinline__ void mma_tile(float* d, const unsigned char* a,
                                         const unsigned char* b) {
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    #pragma unroll
    for (int k = 0; k < 4; k++) {
        u64 da = descriptor(smem_addr(a) + 256 * k, 128, 1024);
        u64 db = descriptor(smem_addr(b) + 256 * k, 128, 1024);
        ''' + wgmma_asm(n) + r'''
    }
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}'''


def wgmma_asm(n: int = 64, trans_b: bool = False) -> str:
    """The inline PTX of one m64nNk16 bf16 wgmma, both operands from shared memory (descriptors
    `da`, `db`), accumulating into float d[0..n/2) (scale-d 1). trans_b: B is read MN-major
    (its N elements contiguous, as a (K, N) matrix stores them) instead of K-major."""
    regs = n // 2
    names = ', '.join(f'%{i}' for i in range(regs))
    outs = ', '.join(f'"+f"(d[{i}])' for i in range(regs))
    return (f'asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{regs + 2}, 0;\\n'
            f'wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 '
            f'{{{names}}}, %{regs}, %{regs + 1}, p, 1, 1, 0, {int(trans_b)};\\n}}\\n"'
            f' : {outs} : "l"(da), "l"(db), "r"(1) : "memory");')


def pack_tiles(m):
    """(R, K) bf16 tensor, R and K multiples of 64 -> the bytes of its 8 KB tiles in (row block,
    K block) order, each in the no-swizzle core-matrix layout the descriptors above read with
    LBO 128 and SBO 1024: the core matrix of rows 8i.. and columns 8j.. at byte 1024 i + 128 j."""
    r, k = m.shape
    t = m.reshape(r // 64, 8, 8, k // 64, 8, 8)  # row block, row group, row, k block, k group, k
    return t.permute(0, 3, 1, 4, 2, 5).contiguous().view(-1).view(torch.uint8)


def unpack_tiles(data, rows: int, k: int):
    """The inverse of pack_tiles: bytes -> the (rows, k) bf16 matrix."""
    t = data.view(torch.bfloat16).reshape(rows // 64, k // 64, 8, 8, 8, 8)
    return t.permute(0, 2, 4, 1, 3, 5).reshape(rows, k)


class _LaunchAttributeValue(ctypes.Union):
    """CUlaunchAttributeValue (cuda.h): a 64-byte union, 8-byte aligned (it holds pointers)."""
    _fields_ = [('pad', ctypes.c_char * 64), ('aligned', ctypes.c_void_p),
                ('cooperative', ctypes.c_int), ('cluster_dim', ctypes.c_uint * 3)]


class _LaunchAttribute(ctypes.Structure):
    """CUlaunchAttribute: the attribute's id, padding to 8 bytes, its value."""
    _fields_ = [('id', ctypes.c_int), ('pad', ctypes.c_char * 4),
                ('value', _LaunchAttributeValue)]


class _LaunchConfig(ctypes.Structure):
    """CUlaunchConfig: grid and block sizes, dynamic shared memory, stream, attributes."""
    _fields_ = [('grid', ctypes.c_uint * 3), ('block', ctypes.c_uint * 3),
                ('shared_mem', ctypes.c_uint), ('stream', ctypes.c_void_p),
                ('attrs', ctypes.POINTER(_LaunchAttribute)), ('num_attrs', ctypes.c_uint)]


LAUNCH_ATTRIBUTE_COOPERATIVE, LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 2, 4  # CUlaunchAttributeID


def launch_config(grid: tuple, block: tuple, shared_mem: int, stream, cluster: int,
                  cooperative: bool = True):
    """The CUlaunchConfig of a launch in clusters of `cluster` blocks along x (cooperative:
    every block resident at once, or an error), and the attribute array it points to (keep
    both alive until the launch returns)."""
    attrs = (_LaunchAttribute * (2 if cooperative else 1))()
    if cooperative:
        attrs[0].id = LAUNCH_ATTRIBUTE_COOPERATIVE
        attrs[0].value.cooperative = 1
    attrs[-1].id = LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attrs[-1].value.cluster_dim[:] = [cluster, 1, 1]
    config = _LaunchConfig((ctypes.c_uint * 3)(*grid), (ctypes.c_uint * 3)(*block), shared_mem,
                           stream, attrs, len(attrs))
    return config, attrs


class TensorMap:
    """A CUtensorMap (128 bytes, 64-byte aligned, as cuTensorMapEncodeTiled requires), passed
    to a kernel by value (its `TensorMap` argument, TENSOR_COPY). Keep it, and the matrix it
    names, alive until the launches that use it are done."""

    BYTES, ALIGN = 128, 64

    def __init__(self):
        self._storage = ctypes.create_string_buffer(self.BYTES + self.ALIGN)
        self.address = -(-ctypes.addressof(self._storage) // self.ALIGN) * self.ALIGN


TENSOR_MAP_DTYPES = {torch.uint8: 0, torch.bfloat16: 9, torch.float32: 7}  # CUtensorMapDataType
L2_PROMOTION_128B = 2  # CUtensorMapL2promotion


def box_geometry(matrix, box_rows: int, box_cols: int) -> dict:
    """The cuTensorMapEncodeTiled arguments of a 2-D box copy from `matrix` (rows, cols), whose
    rows may lie any multiple of 16 bytes apart (a strided view), checked against the limits the
    driver enforces: a box of at most 256 x 256 elements whose rows are a multiple of 16 bytes,
    a 16-byte aligned base."""
    if matrix.dim() != 2 or matrix.stride(1) != 1:
        raise ValueError(f'a tensor map needs a 2-D matrix with unit column stride, not '
                         f'{tuple(matrix.shape)} strided {matrix.stride()}')
    if matrix.dtype not in TENSOR_MAP_DTYPES:
        raise ValueError(f'no tensor-map data type for {matrix.dtype}')
    size = matrix.element_size()
    rows, cols = matrix.shape
    pitch = matrix.stride(0) * size
    if not (0 < box_rows <= min(256, rows) and 0 < box_cols <= min(256, cols)):
        raise ValueError(f'box {box_rows} x {box_cols} does not fit 256 x 256 and the '
                         f'{rows} x {cols} matrix')
    if box_cols * size % 16 or pitch % 16 or matrix.data_ptr() % 16:
        raise ValueError(f'box rows of {box_cols * size} bytes, a row pitch of {pitch} and the '
                         f'base address must all be multiples of 16 bytes')
    return {'dtype': TENSOR_MAP_DTYPES[matrix.dtype], 'dims': (cols, rows), 'pitch': pitch,
            'box': (box_cols, box_rows), 'box_bytes': box_rows * box_cols * size}


def encode_tensor_map(matrix, box_rows: int, box_cols: int) -> TensorMap:
    """cuTensorMapEncodeTiled for box copies of box_rows x box_cols from `matrix` (tile mode,
    no interleave, no swizzle: the box lands in shared memory row after row, as in the matrix;
    L2 promotion of 128 bytes; out-of-range elements read as zeros)."""
    g = box_geometry(matrix, box_rows, box_cols)
    tensor_map = TensorMap()
    libcuda = torch.cuda._utils._get_gpu_runtime_library()
    torch.cuda._utils._check_cuda(libcuda.cuTensorMapEncodeTiled(
        ctypes.c_void_p(tensor_map.address), g['dtype'], 2, ctypes.c_void_p(matrix.data_ptr()),
        (ctypes.c_uint64 * 2)(*g['dims']), (ctypes.c_uint64 * 1)(g['pitch']),
        (ctypes.c_uint32 * 2)(*g['box']), (ctypes.c_uint32 * 2)(1, 1), 0, 0,
        L2_PROMOTION_128B, 0))
    return tensor_map


def _kernel_arguments(args: list):
    """ctypes values of a kernel's arguments and the void* array that points to them."""
    values = []
    for arg in args:
        if isinstance(arg, TensorMap):
            values.append(arg)
        elif isinstance(arg, torch.Tensor):
            values.append(ctypes.c_void_p(arg.data_ptr()))
        elif isinstance(arg, int):
            values.append(ctypes.c_int(arg))
        elif isinstance(arg, float):
            values.append(ctypes.c_float(arg))
        else:
            raise TypeError(f'kernel argument of type {type(arg).__name__}: tensors, ints, '
                            'floats and tensor maps only')
    array = (ctypes.c_void_p * len(values))(
        *[ctypes.c_void_p(v.address) if isinstance(v, TensorMap)
          else ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in values])
    return values, array


def _launch_ex(kernel, grid: tuple, block: tuple, args: list, shared_mem: int, cluster: int,
               cooperative: bool) -> None:
    """cuLaunchKernelEx on the current stream in clusters of `cluster` blocks along x."""
    if grid[0] % cluster:
        raise ValueError(f'a grid of {grid[0]} blocks does not split into clusters of {cluster}')
    _values, array = _kernel_arguments(args)
    libcuda = torch.cuda._utils._get_gpu_runtime_library()
    config, _attrs = launch_config(grid, block, shared_mem,
                                   torch.cuda.current_stream().cuda_stream, cluster, cooperative)
    torch.cuda._utils._check_cuda(libcuda.cuLaunchKernelEx(
        ctypes.byref(config), kernel.func, array, None))


def launch_cluster(kernel, grid: tuple, block: tuple, args: list, shared_mem: int, cluster: int):
    """Launch a `torch.cuda._compile_kernel` kernel on the current stream in thread-block
    clusters of `cluster` blocks along x (cuLaunchKernelEx with the cluster-dimension
    attribute; not cooperative: clusters run as SMs free up). A plain launch makes no
    clusters, and a kernel that reads another block's shared memory needs one."""
    _launch_ex(kernel, grid, block, args, shared_mem, cluster, cooperative=False)


def launch_cooperative(kernel, grid: tuple, block: tuple, args: list, shared_mem: int = 0,
                       cluster: int = 1):
    """Launch a `torch.cuda._compile_kernel` kernel on the current stream as a cooperative
    grid (cuLaunchCooperativeKernel): the driver guarantees every block resident at once, or
    refuses the launch with an error. A kernel with a grid-wide barrier needs that guarantee: a
    plain launch that leaves one block waiting for an SM hangs the barrier's other blocks.
    cluster > 1: the blocks go in thread-block clusters of that many along x (cuLaunchKernelEx
    with the cooperative and cluster-dimension attributes), so that they can share shared
    memory (the multicast bulk copies)."""
    if cluster > 1:
        _launch_ex(kernel, grid, block, args, shared_mem, cluster, cooperative=True)
        return
    _values, array = _kernel_arguments(args)
    libcuda = torch.cuda._utils._get_gpu_runtime_library()
    torch.cuda._utils._check_cuda(libcuda.cuLaunchCooperativeKernel(
        kernel.func, *grid, *block, shared_mem, torch.cuda.current_stream()._as_parameter_,
        array))
