"""Switch model stages in the passes' form onto lamp_ros's kernels (the cuda backend's lowering).

What changes, per stage: unit RMSNorms and per-step adaRMS norms become `lamp::rms_norm` (one
kernel instead of six), RoPE becomes `lamp::rope` with the cos/sin rows gathered once per stage
call instead of per layer, GeGLU becomes `lamp::geglu`, and residual adds move into the GEMM
epilogue (`addmm` with beta = 1; `addcmul` where the adaRMS gate scales the branch), and an
attention fused by its pass with one K/V head becomes two GEMMs with every query head as rows
around `lamp::masked_softmax` (on the H200 the fused cuDNN kernel, given one (batch, head) of
work, ran 93 us per call at the expert's 50 queries: 53% of the inference). Stages still
in the eager form (no graph pass ran) are left alone. The numbers are those of the float32
reference code, rounded once instead of after every op, so parity holds at the group precision.
"""

from lamp_ros.compiler.passes.modules import (Attention, DecoderLayer, GeGLU, Rotary,
                                              StepAdaRMSNorm, UnitRMSNorm)

SWITCHED = {UnitRMSNorm: 'rms_norm', StepAdaRMSNorm: 'ada_rms_norm', Rotary: 'rope',
            GeGLU: 'geglu', DecoderLayer: 'residual_epilogues', Attention: 'attention'}


def use_kernels(modules: dict) -> dict:
    """Turn the kernel switch on in every module that has one, in place -> {what: count}."""
    counts = {}
    for stage in modules.values():
        for module in stage.modules():
            what = SWITCHED.get(type(module))
            if what is None or module.kernel:
                continue
            module.kernel = True
            counts[what] = counts.get(what, 0) + 1
    return counts
