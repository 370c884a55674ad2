"""The Triton kernel modules, imported on an operator's first CUDA call.

Triton is a GPU-machine dependency: CPU-only machines (the CPU artifacts, the reference runs of
the tests) import the operators but never a kernel module. The loaders that several operator
modules share live here, once; a loader only one module needs stays in that module.
"""


def load_triton_kernels():
    from lamp_ros.kernels import triton_kernels
    return triton_kernels


def load_triton_expert_gemm():
    from lamp_ros.kernels import triton_expert_gemm
    return triton_expert_gemm
