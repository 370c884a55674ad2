"""What pi0.5 adds to the compiler (compiler/rewrites.py): its graph passes, its cuda lowering
onto lamp's kernels, its vision stage on camera frames and the linears a precision plan keeps.
policies/pi05/__init__.py registers them for Pi05Policy."""

import copy

from lamp_ros.compiler.rewrites import Rewrites
from lamp_ros.policies.pi05.cuda.lowering import use_kernels
from lamp_ros.policies.pi05.passes import APPROXIMATE, PASSES
from lamp_ros.policies.pi05.staged.lower import lower, stage_kind
from lamp_ros.policies.pi05.staged.stages import ExpertStage


def vision_on_frames(module):
    """A copy of the vision stage (passes' form) that takes the cameras' frames and their
    letterbox tables; the given module is left as it is (it may be the eager reference's)."""
    stage = lower(module)
    if stage_kind(stage) != 'vision':
        raise ValueError(f'fusion.device_letterbox: the pixels\' reader is a '
                         f'{type(module).__name__}, not the vision stage')
    stage = copy.copy(stage)  # shares the submodules and weights; the flag is the copy's own
    stage.letterbox = True
    return stage


def low_precision_refusals(modules: dict) -> dict:
    """The linears a precision plan must keep: the whole action expert. Its fused layer
    kernels (ExpertKernels) read its linears' weights in the stage precision, its stage code
    reads their dtype, and at its 50 rows a step its GEMMs are bound by latency, not by
    arithmetic, so FP8 would not make them faster (passes/fp8_prefix_mlp.py)."""
    return {node: 'the action expert: its fused layer kernels read bf16 weights, and its '
                  '50-row GEMMs are latency-bound' for node, stage in modules.items()
            if isinstance(stage, ExpertStage)}


REWRITES = Rewrites(passes=tuple(PASSES), approximate=APPROXIMATE, cuda_lowering=use_kernels,
                    letterbox_stage=vision_on_frames,
                    low_precision_refusals=low_precision_refusals)
