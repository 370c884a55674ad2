"""fp8_prefix_mlp: the prefix's MLP GEMMs in FP8 (e4m3) numbers. Changes numerics; opt-in.

The prefix runs 17 GeGLU MLPs over ~1k tokens: about 90% of its matrix work, and compute-bound at
the bf16 tensor-core rate. Hopper's FP8 tensor cores run twice that rate, so cuBLASLt's FP8 GEMMs
run gate/up and down markedly faster at these shapes (gate/up faster still with fast sums;
CUDA-graph timed, docs/notebook/). The other GEMMs of the vision and the prefix gain little in FP8
once their rows are quantised, or lose (with lamp::fp8_rows; less without it where a norm makes the
rows): a small share of an inference for as much again of the actions' error (the vision MLPs' fake
quantisation nearly doubled it), and the expert's GEMMs are bound by latency, not arithmetic (no
faster in FP8 at 50 rows), so only the prefix MLPs change.

Each of their linears becomes an `Fp8Linear`: weights as e4m3 codes with a power-of-two scale per
output row (chosen here, once), activations quantised per row on the fly (the GeGLU output in the
same pass as the GeGLU). The merged gate/up GEMM sums in cuBLASLt's fast FP8 mode
(`use_fast_accum`: the tensor cores' partial sums are not promoted to float32 along K): faster, its
error against float32 sums of the same codes (relative L2) a little larger, small beside the e4m3
rounding itself. The down GEMM (K = 16384) keeps float32 promotion: fast mode saved little there
and doubled that error (docs/notebook/). The CPU path sums in float32 either way. That is an
approximation, not a rewrite: unlike the other passes it does not keep parity to float rounding, so
no spec turns it on by default, and a spec that does states the parity it accepts. The details say
how far the weights moved and which GEMMs sum fast on the GPU.
"""

from lamp_ros.policies.pi05.passes.stage_rewrite import rewrite
from lamp_ros.kernels.linears import Fp8Linear


FAST_ACCUMULATION = {'gate_up': True, 'down': False}  # see the module doc


def _quantize(linear, fast_accumulation: bool) -> tuple:
    """nn.Linear -> (Fp8Linear, ||W - W8|| / ||W||)."""
    fp8 = Fp8Linear.from_linear(linear, fast_accumulation)
    w = linear.weight.float()
    return fp8, float((fp8.dequantized() - w).norm() / w.norm().clamp(min=1e-30))


def _prefix(stage) -> dict:
    layers, linears, params, worst = 0, 0, 0, 0.0
    for layer in stage.layers:
        mlp = layer.mlp
        if mlp is None or mlp.fp8:
            continue
        for attr, _, _ in mlp.in_proj.parts:
            fp8, err = _quantize(getattr(mlp.in_proj, attr), FAST_ACCUMULATION['gate_up'])
            setattr(mlp.in_proj, attr, fp8)
            params, worst = params + fp8.codes.numel(), max(worst, err)
        mlp.down_proj, err = _quantize(mlp.down_proj, FAST_ACCUMULATION['down'])
        params, worst = params + mlp.down_proj.codes.numel(), max(worst, err)
        layers += 1
        linears += len(mlp.in_proj.parts) + 1
    if not layers:
        return {}
    return {'mlp_layers': layers, 'linears': linears, 'parameters_fp8': params,
            'format': 'e4m3, power-of-two scale per weight row and per activation row',
            'gpu_accumulation': {name: 'fast' if fast else 'float32'
                                 for name, fast in FAST_ACCUMULATION.items()},
            'weight_rel_error_max': round(worst, 6)}


def fp8_prefix_mlp(modules: dict) -> tuple:
    return rewrite(modules, {'prefix': _prefix})
