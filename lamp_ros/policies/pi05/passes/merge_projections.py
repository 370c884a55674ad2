"""merge_projections: linears that read the same input become one GEMM, split after.

q/k/v of every attention (vision, prefix, expert; k/v of a K/V-only layer) and gate/up of every
GeGLU: one wider matmul instead of two or three narrow ones, the realtime-vla lesson. The
merged weight is the row concatenation, so each output is the same dot product as before.
"""

from lamp_ros.policies.pi05.passes.stage_rewrite import rewrite
from lamp_ros.policies.pi05.staged.fan_out import FanOut, proj_name


def _merge_all(stage) -> dict:
    counts = {}
    for module in list(stage.modules()):
        for attr, child in list(module.named_children()):
            if not isinstance(child, FanOut) or len(child.parts) < 2:
                continue
            setattr(module, attr, child.select(child.names, merge=True))
            key = proj_name(child.names).removesuffix('_proj')
            counts[key] = counts.get(key, 0) + 1
            counts['linears_removed'] = counts.get('linears_removed', 0) + len(child.parts) - 1
    return counts


def merge_projections(modules: dict) -> tuple:
    return rewrite(modules, {'vision': _merge_all, 'prefix': _merge_all, 'expert': _merge_all})
