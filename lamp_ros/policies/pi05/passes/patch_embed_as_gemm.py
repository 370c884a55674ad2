"""patch_embed_as_gemm: the vision's patch embedding as one GEMM instead of a convolution.

SigLIP embeds 14 x 14 patches with a Conv2d whose stride is its kernel: each output is a dot
product of one patch's pixels with a filter, i.e. a linear map of the patch. Written as a
convolution it runs as one on the GPU: cuDNN's implicit-GEMM kernel on the NCHW view of the
channels-last pixels, plus two padding kernels, many times slower (docs/notebook/) than a product
of 768 x 588 by 588 x 1152 needs (1 GFLOP, a few us as a GEMM). As a `PatchLinear` the pixels are
cut into patches by a reshape and a transpose and multiplied by the filters laid out (row, column,
channel) to match, and the conv bias and the position table, both added per (patch, channel),
become one table. The products are the conv's, summed in another order: outputs equal to float
rounding. A patch's 588 values are padded with zeros to 592 so that the GEMM's rows are 16-byte
aligned (unfold, pad and aligned GEMM together ran faster than the unaligned GEMM alone;
docs/notebook/).
"""

from lamp_ros.policies.pi05.passes.stage_rewrite import rewrite
from lamp_ros.policies.pi05.staged.patch_linear import PatchLinear


def _vision(stage) -> dict:
    if isinstance(stage.patch_embed, PatchLinear):
        return {}
    conv = stage.patch_embed
    stage.patch_embed = PatchLinear.from_conv(conv, stage.pos_embed)
    stage.pos_embed = None  # in the patch GEMM's table now
    width, padded = stage.patch_embed.weight.shape
    return {'patch_embed': 'conv -> gemm', 'gemm': [conv.weight[0].numel(), width],
            'k_padded_to': padded, 'patches': stage.patch_embed.table.shape[0],
            'position_table': 'folded'}


def patch_embed_as_gemm(modules: dict) -> tuple:
    return rewrite(modules, {'vision': _vision})
