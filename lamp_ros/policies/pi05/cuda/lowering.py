"""Switch model stages in the passes' form onto lamp_ros's kernels (the cuda backend's lowering).

What changes, per stage: unit RMSNorms and per-step adaRMS norms become `lamp::rms_norm` (one
kernel instead of six), the vision's affine-free LayerNorms `lamp::layer_norm`, a norm that reads a
residual sum whose GEMM could not add the residual (a bias epilogue, FP8) `lamp::add_norm` (the add
and the norm in one kernel), RoPE becomes `lamp::rope` with the cos/sin rows gathered once per
stage call instead of per layer (`lamp::rope_qk`: a layer's q and k in one launch), GeGLU becomes
`lamp::geglu`, and residual adds move into the GEMM epilogue (`addmm` with beta = 1; `addcmul`
where the adaRMS gate scales the branch), FP8 linears (the fp8_prefix_mlp pass) of a bf16 stage
become float8 codes for torch._scaled_mm with their rows quantised by `lamp::fp8_rows`,
`lamp::rms_norm_fp8` (the norm before them, in the same pass; `lamp::add_rms_norm_fp8` when the
attention output is still to be added: DecoderLayer.defers_attention_residual) or
`lamp::geglu_fp8`, and an attention fused by its pass with one K/V head becomes two GEMMs with
every query head as rows around `lamp::masked_softmax` (the fused cuDNN kernel, given one (batch,
head) of work per call at the expert's 50 queries, leaves the GPU mostly idle; docs/notebook/), and
the vision blocks' fc1 takes its GELU in the cuBLASLt epilogue (on a GPU; VisionBlock.hidden).
Stages still in the eager form (no graph pass ran) are left alone. The numbers are those of the
float32 reference code, rounded once instead of after every op, so parity holds at the group
precision.

Then come the choices the build GPU decides by timing (each recorded with where it came from
and its timings in `tuning_out`; choices.py): every expert layer in the passes' final form gets
its `ExpertKernels`, each part fused or in its library form (expert_layers.py), the prefix's
attentions `lamp::mqa_flash` or their two GEMMs around `lamp::masked_softmax`
(prefix_attention.py), and the vision's and prefix's plain linears the layout of their weights
and their cuBLASLt algorithm (gemms.py). How far the lowering goes is the spec's `build:`
options (spec/build_options.py), which plan.json records.
"""

import torch

from lamp_ros.kernels.linears import Fp8Linear
from lamp_ros.policies.pi05.cuda import choices
from lamp_ros.policies.pi05.cuda.expert_layers import fuse_expert_layers
from lamp_ros.policies.pi05.cuda.gemms import choose_gemm_algorithms, choose_weight_layouts
from lamp_ros.policies.pi05.cuda.prefix_attention import flash_prefix_attention
from lamp_ros.policies.pi05.staged.attention import Attention
from lamp_ros.policies.pi05.staged.geglu import GeGLU
from lamp_ros.policies.pi05.staged.layers import DecoderLayer, VisionBlock
from lamp_ros.policies.pi05.staged.norms import StepAdaRMSNorm, UnitLayerNorm, UnitRMSNorm
from lamp_ros.policies.pi05.staged.rotary import Rotary
from lamp_ros.policies.pi05.staged.stages import ExpertStage, PrefixStage, VisionStage
from lamp_ros.spec import BuildOptions

SWITCHED = {UnitRMSNorm: 'rms_norm', UnitLayerNorm: 'layer_norm',
            StepAdaRMSNorm: 'ada_rms_norm', Rotary: 'rope', GeGLU: 'geglu',
            DecoderLayer: 'residual_epilogues', Attention: 'attention',
            VisionBlock: 'gelu_epilogue'}


def use_kernels(modules: dict, tuning_out: dict | None = None,
                text_lengths: tuple = (), options: BuildOptions | None = None,
                measure_tiles: bool = False) -> dict:
    """Turn the kernel switch on in every module that has one, give every expert layer in the
    fused kernels' form its step constants and the prefix's attentions their measured form, in
    place -> {what: count} of the switched modules that run (not those an expert layer's
    fused or premade parts bypass, which the expert_* counts stand for). `text_lengths`: the
    prompt lengths the group is captured for (backends/text_lengths.py; the full one last),
    whose row counts the prefix's GEMM algorithms are chosen at. `measure_tiles`: time every
    choice on the build GPU even where its tile cache holds one (`lamp compile
    --measure-tiles`)."""
    counts = {}
    out = tuning_out if tuning_out is not None else {}
    options = options or BuildOptions()
    for stage in modules.values():
        weight = next(stage.parameters(), None)
        cache = {} if measure_tiles or weight is None else choices.tile_cache(weight.device)
        for module in stage.modules():
            if isinstance(module, Fp8Linear) and not module.kernel \
                    and module.codes.dtype == torch.bfloat16 and module.codes.is_cuda:
                module.use_kernel()  # torch._scaled_mm's row-wise scales want a bf16 output
                counts['fp8_linear'] = counts.get('fp8_linear', 0) + 1
                continue
            what = SWITCHED.get(type(module))
            if what is None or module.kernel:
                continue
            module.kernel = True
            counts[what] = counts.get(what, 0) + 1
        if isinstance(stage, ExpertStage):
            fused = fuse_expert_layers(stage, out, cache, options.expert_rope_in_qkv)
            if fused:
                counts['expert_layer'] = fused
                for what, bypassed in bypassed_modules(stage).items():
                    counts[what] -= bypassed
                    if not counts[what]:
                        del counts[what]
            for part in ('qkv', 'gate_up'):  # premade forms: their norm kernels never run
                premade = sum(layer.expert_kernels is not None
                              and layer.expert_kernels.form(part) == 'premade'
                              for layer in stage.layers)
                if premade:
                    counts[f'expert_premade_{part}'] = premade
            rotating = sum(layer.expert_kernels is not None
                           and layer.expert_kernels.rotates_in_qkv() for layer in stage.layers)
            if rotating:
                counts['expert_rope_in_qkv'] = rotating
            pdl = _on_hopper(stage, options.expert_pdl)
            if fused and pdl:
                for layer in stage.layers:
                    if layer.expert_kernels is not None:
                        layer.expert_kernels.pdl = pdl
                counts[f'expert_layer_pdl{pdl}'] = fused
            tma = _on_hopper(stage, int(options.expert_tma))
            if fused and tma:
                for layer in stage.layers:
                    if layer.expert_kernels is not None:
                        layer.expert_kernels.tma = tma
                counts['expert_gated_tma'] = fused
        if isinstance(stage, PrefixStage):
            fused = flash_prefix_attention(stage, out, cache)
            if fused:
                counts['flash_attention'] = fused
        if isinstance(stage, (VisionStage, PrefixStage)):
            moved = choose_weight_layouts(stage, out, cache)
            if moved:
                counts['kn_weights'] = counts.get('kn_weights', 0) + moved
            stored = choose_gemm_algorithms(stage, out, text_lengths, cache) \
                if options.gemm_algorithms else 0
            if stored:
                counts['cublaslt_linear'] = counts.get('cublaslt_linear', 0) + stored
    return counts


def bypassed_modules(stage: ExpertStage) -> dict:
    """{what: count} of the switched modules in the expert's layers that their ExpertKernels
    never call, so that the counts say which kernels run: a layer's residual epilogues (every
    form of its o and down takes the residual itself), the adaRMS norm before a part in its
    fused or premade form (and the GeGLU after gate_up's), the attention module unless the
    attention part is in its library form."""
    out = {}
    for layer in stage.layers:
        kern = layer.expert_kernels
        if kern is None:
            continue
        skipped = [layer]
        if kern.form('qkv') != 'library':
            skipped.append(layer.input_norm)
        if kern.form('gate_up') != 'library':
            skipped += [layer.post_attn_norm, layer.mlp]
        if kern.form('attention') != 'library':
            skipped.append(layer.attn)
        for module in skipped:
            what = SWITCHED.get(type(module))
            if what is not None and module.kernel:
                out[what] = out.get(what, 0) + 1
    return out


def is_hopper(stage) -> bool:
    """The stage's weights are on a Hopper or later GPU (dependent launch, tensor descriptors)."""
    weight = next(stage.parameters(), None)
    return weight is not None and weight.device.type == 'cuda' and \
        torch.cuda.get_device_capability(weight.device) >= (9, 0)


def _on_hopper(stage, value: int) -> int:
    """`value` (a build option: the expert's dependent-launch mode, its gated GEMMs'
    descriptor loads) where the stage runs on a Hopper or later GPU, else 0.

    Dependent launch (mode 2, the default): each lamp kernel of the expert's layers waits for
    the kernel before it at its first line and lets the next one launch after its main loop,
    so the launch and the next kernel's start overlap this one's tail (measured on the whole
    graph, one artifact timed with it on and off: actions bit-identical, a little faster;
    docs/notebook). Descriptor loads: the fused gated GEMMs (o, down) load x and W by tensor
    descriptor instead of by pointer, the same numbers bit for bit; set after the timing, so
    the tile cache's timings stay comparable."""
    return value if is_hopper(stage) else 0
