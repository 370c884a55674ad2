"""lamp_ros's own GPU kernels, registered as torch operators (`lamp::*`).

A pi0.5 inference on a GPU is thousands of small element-wise launches around a few hundred
GEMMs: every RMSNorm is six kernels in eager PyTorch, every RoPE a dozen, every GeGLU three. Each
operator here does one such chain in one Triton kernel, reading and writing the activations once.

- operators/: the operators, one module per kind (`lamp::rms_norm`, `lamp::rope`, `lamp::geglu`,
  FP8 rows, `lamp::letterbox`, `lamp::masked_softmax`; the expert layer's `lamp::ada_linear`,
  `ada_geglu`, `gated_linear`, the premade GEMMs, `mqa_attention`; the prefix's
  `lamp::mqa_flash`; `lamp::lt_linear`), each with a reference implementation in plain torch
  (CPU, and the definition of what the kernel must compute), a CUDA implementation calling the
  Triton kernel, and a shape function so torch.export records the operator by name.
- triton_kernels.py (element-wise chains), triton_expert_gemm.py (the expert's fused GEMMs),
  triton_attention.py (the multi-query attentions), triton_premade.py (the premade normed
  GEMMs): the kernels (imported only when a CUDA tensor reaches an operator).
- cublaslt.py: cuBLASLt through ctypes, for `lamp::lt_linear`, a plain linear on the cuBLASLt
  algorithm the build measured fastest (stored in the program, run only with the cuBLASLt
  version and on the GPU that measured it).
- tuning.py: times the alternatives (tilings, or the library form) on the build GPU, tiles/
  keeps its choices. The policy's cuda lowering (in lamp_ros/policies) switches the passes'
  modules onto these operators (the cuda backend does it before export; the runtime imports
  operators/ before it loads the program).
"""
