"""The cuda backend: a group's model stages exported with torch.export, replayed as CUDA graphs.

A package so that its two sides stay apart, as backends/__init__.py asks of every backend:
compile_side.py lowers and exports the group on a build machine with a GPU, run_side.py loads
the archive and replays it on the robot, and neither imports the other. This module is what
`get_backend('cuda')` hands the compiler and the runtime (`NAME`, `supports`, `device_for`,
`compile`, `load`; `precision_variants` for a precision plan). Neither side imports torch at
module level, so importing the backend imports no torch.

The backend knows no model: what a policy's stages become on the GPU (lamp_ros's own kernels,
tuned tiles) is the policy's cuda lowering, which the compiler passes in as `ctx.lowering`
(compiler/rewrites.py; for example pi0.5's `use_kernels`,
lamp_ros/policies/pi05/cuda/lowering.py).

The cuda-only helpers live beside the two sides: program_weights.py (the weights kept once, in
weights/), program_load.py (the archive's load), graph_phases.py (the first stage captured
apart), stage_streams.py (side stages on a second stream), kernel_trace.py (the replay under
torch's profiler), torch_cuda.py (torch with a GPU, or BackendUnavailable).
"""

from lamp_ros.backends.cuda.compile_side import compile
from lamp_ros.backends.cuda.run_side import load

NAME = 'cuda'

__all__ = ['NAME', 'supports', 'device_for', 'compile', 'load', 'precision_variants']


def supports(node) -> tuple:
    if node.kind != 'model':
        return False, 'the CUDA backend runs model stages; host ops run on host'
    return True, 'model stage exported with torch.export, replayed as one CUDA graph'


def device_for(target: str) -> str:
    return 'cuda:0'


def precision_variants(graph, group, modules, example, device: str = 'cuda'):
    """The group's stages as a precision plan's eager variants, linears in FP8 on demand
    (fp8_variants.py; compiler/precision_modules.py plans with them)."""
    from lamp_ros.backends.cuda.fp8_variants import Fp8Variants
    return Fp8Variants(graph, group, modules, example, device)
