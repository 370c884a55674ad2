"""lamp_ros's own GPU kernels, registered as torch operators (`lamp::*`).

A pi0.5 inference on a GPU is thousands of small element-wise launches around a few hundred
GEMMs: every RMSNorm is six kernels in eager PyTorch, every RoPE a dozen, every GeGLU three. Each
operator here does one such chain in one Triton kernel, reading and writing the activations once.

- ops.py: the operators (`lamp::rms_norm`, `lamp::rope`, `lamp::geglu`,
  `lamp::masked_softmax`; the expert layer's `lamp::ada_linear`, `ada_geglu`, `gated_linear`,
  `mqa_attention`; the prefix's `lamp::mqa_flash`; `lamp::lt_linear`), each with a reference
  implementation in plain torch (CPU, and the definition of what the kernel must compute), a
  CUDA implementation calling the Triton kernel, and a shape function so torch.export records
  the operator by name.
- triton_kernels.py, triton_expert.py: the kernels (imported only when a CUDA tensor reaches
  an operator).
- cublaslt.py: cuBLASLt through ctypes, for `lamp::lt_linear`, a plain linear on the cuBLASLt
  algorithm the build measured fastest (stored in the program, run only with the cuBLASLt
  version and on the GPU that measured it).
- lowering.py: switches the passes' modules onto these operators (the cuda backend does it
  before export; the runtime imports ops.py before it loads the program); tuning.py times the
  alternatives (tilings, or the library form) on the build GPU, tiles/ keeps its choices.
"""
