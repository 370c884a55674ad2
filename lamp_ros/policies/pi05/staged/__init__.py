"""pi0.5's model stages in the passes' form: the form every graph pass reads and rewrites.

The eager policy's layers (policies/pi05/gemma.py, siglip.py) fix which projections exist and call
them by name; passes need one shape that can also say "q/k/v are one GEMM now", "this norm has
no affine any more" or "this layer only makes K/V". So the stages are lowered (lower.py) into
these stages (stages.py) and layers, which compute exactly what the originals compute until a
pass changes them (the linears a pass or the cuda lowering swaps in, FP8, (in, out) weights,
stored cuBLASLt algorithms, are kernels/linears.py's):

- `FanOut` (fan_out.py): linears that read the same input, each making one or more named
  outputs; merged, one linear makes them all and the result is split.
- `UnitRMSNorm` (norms.py): RMSNorm whose (1 + weight) scale was folded into the linears it
  feeds; `UnitLayerNorm` the same for a LayerNorm's gamma and beta.
- `StepAdaRMSNorm` (norms.py): adaRMS whose scale/shift/gate come from a table indexed by Euler
  step.
- `Rotary` (rotary.py): RoPE, computed from positions, or looked up in folded cos/sin tables.
- `Attention` (attention.py) and `GeGLU` (geglu.py): a Gemma layer's two branches over FanOuts.
- `DecoderLayer`, `VisionBlock` (layers.py): the Gemma and SigLIP layers around them.
- `PatchLinear` (patch_linear.py): a stride = kernel Conv2d patch embedding as one GEMM over
  unfolded patches.

Modules with a `kernel` switch run on lamp_ros's own operators when it is on (kernels/operators/:
one fused kernel per norm, RoPE, GeGLU; residual adds in the GEMM epilogue, or in the next
norm's kernel where the GEMM cannot take them: `add_then_norm`), and an expert
layer given `ExpertKernels` (expert_kernels.py) runs on the kernels the build measured fastest.
Only the cuda backend does either (policies/pi05/cuda/), just before export; the CPU
artifacts export these modules to ONNX, which knows no `lamp::` operators.
"""
