"""fuse_attention: each attention as one fused kernel call (scaled_dot_product_attention).

The prototype writes attention as einsum -> float32 logits -> masked_fill -> softmax -> einsum,
materialising every (heads, n, m) logit tensor and repeating the one K/V head per query head.
The fused call computes the same function in one kernel (flash / memory-efficient where the
device has them): the boolean mask becomes an additive mask with the same finite fill, so fully
masked rows keep the eager code's uniform softmax. Rounding differs (fp32 logits there, the
kernel's accumulation here): parity, not bit equality.
"""

from lamp_ros.policies.pi05.passes.stage_rewrite import rewrite


def _stage(stage) -> dict:
    fused = 0
    for layer in stage.layers:
        if not layer.kv_only and not layer.attn.fused:
            layer.attn.fused = True
            fused += 1
    return {'attention_layers': fused} if fused else {}


def fuse_attention(modules: dict) -> tuple:
    return rewrite(modules, {'prefix': _stage, 'expert': _stage})
