"""CUDA C++ helpers of the NVRTC probes for sm_90a (scripts/device/nvrtc_hopper_check.py,
wgmma_check.py): the inline PTX a persistent expert would be built from, written once. Prepend
`HELPERS` to a kernel's source."""

HELPERS = r'''
typedef unsigned long long u64;

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    unsigned r;
    asm volatile("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }"
                 : "=r"(r) : "l"(p));
    return r;
}
// spin until the mbarrier at shared address `bar` completes the phase of parity `phase`
__device__ __forceinline__ void wait_phase(unsigned bar, unsigned phase) {
    unsigned done = 0;
    while (!done) {
        asm volatile("{ .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     " selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(bar), "r"(phase) : "memory");
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
