"""fold_norm_affine: a norm's affine moves into the linears that read its output.

RMSNorm (Gemma): lin(n * (1 + g)) = (W diag(1 + g)) n, so W's columns are scaled and the norm
keeps only x / rms(x). LayerNorm (SigLIP): lin(n * gamma + beta) = (W diag(gamma)) n +
(W beta + b). Exact in real arithmetic; the folded weights are computed in float64 and differ
from the unfolded result by float32 rounding only. adaRMS is left alone: its scale and shift
depend on the flow time, not on the weights (precompute_time_conditioning handles that).
Every RMSNorm / LayerNorm that feeds linears only is folded: prefix input_norm -> q/k/v and
post_attn_norm -> gate/up, vision norm1 -> q/k/v, norm2 -> fc1, post_norm -> projector.
"""

from torch import nn

from lamp_ros.policies.pi05.passes.stage_rewrite import rewrite
from lamp_ros.policies.pi05.staged.norms import UnitLayerNorm, UnitRMSNorm
from lamp_ros.policies.pi05.gemma import RMSNorm


def _scale_columns(linear: nn.Linear, scale, shift=None) -> None:
    w = linear.weight.double()
    if shift is not None:
        bias = w @ shift.double()
        if linear.bias is not None:
            bias = bias + linear.bias.double()
        else:
            linear.bias = nn.Parameter(bias.new_zeros(bias.shape))
        linear.bias.copy_(bias.to(linear.bias.dtype))
    linear.weight.copy_((w * scale.double()[None, :]).to(linear.weight.dtype))


def _fold(owner, attr: str, linears: list) -> str | None:
    norm = getattr(owner, attr)
    if isinstance(norm, RMSNorm):
        for linear in linears:
            _scale_columns(linear, 1.0 + norm.weight.double())
        setattr(owner, attr, UnitRMSNorm(norm.eps))
        return 'rms_norms'
    if isinstance(norm, nn.LayerNorm) and norm.elementwise_affine:
        for linear in linears:
            _scale_columns(linear, norm.weight, norm.bias)
        setattr(owner, attr, UnitLayerNorm(norm.eps))
        return 'layer_norms'
    return None  # adaRMS, or folded already


def _fold_all(stage) -> dict:
    counts = {}
    for module in list(stage.modules()):
        for attr, linears in getattr(module, 'norm_readers', lambda: [])():
            kind = _fold(module, attr, linears)
            if kind:
                counts[kind] = counts.get(kind, 0) + 1
                counts['linears'] = counts.get('linears', 0) + len(linears)
    return counts


def fold_norm_affine(modules: dict) -> tuple:
    return rewrite(modules, {'vision': _fold_all, 'prefix': _fold_all, 'expert': _fold_all})
