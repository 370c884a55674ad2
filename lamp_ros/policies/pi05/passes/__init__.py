"""pi0.5's graph-level passes over its model stages, in the order they run (registered with the
compiler in rewrites.py).

Each pass is a pure function named for its effect: `pass(modules) -> (modules, PassResult)`,
where modules maps a model node id to its stage module. It never changes the modules it is
given (it lowers a deep copy into the passes' form, staged/) and hands back every stage it did
not change as it was. The compiler runs the passes the spec switches on
(`passes: {name: true}`) after tracing and before partitioning; parity then compares the
optimised artifact with the unoptimised eager policy. Every pass but those in APPROXIMATE keeps
the outputs to float rounding; an approximate one (FP8 numbers) is on only where a spec says so
and states the parity it accepts.
"""

from lamp_ros.policies.pi05.passes.fold_constants import fold_constants
from lamp_ros.policies.pi05.passes.fold_euler_update import fold_euler_update
from lamp_ros.policies.pi05.passes.fold_norm_affine import fold_norm_affine
from lamp_ros.policies.pi05.passes.fp8_prefix_mlp import fp8_prefix_mlp
from lamp_ros.policies.pi05.passes.fuse_attention import fuse_attention
from lamp_ros.policies.pi05.passes.merge_projections import merge_projections
from lamp_ros.policies.pi05.passes.patch_embed_as_gemm import patch_embed_as_gemm
from lamp_ros.policies.pi05.passes.precompute_time_conditioning import precompute_time_conditioning
from lamp_ros.policies.pi05.passes.remove_unread_work import remove_unread_work

PASSES = [
    # norm affines into the next linears (before merging, so the merged GEMM holds them)
    fold_norm_affine,
    # q/k/v and gate/up as one GEMM each
    merge_projections,
    # the expert's time MLP and adaRMS modulations as per-step tables
    precompute_time_conditioning,
    # the prefix's final norm and its last layer past K/V
    remove_unread_work,
    # dt into the expert's output projection
    fold_euler_update,
    # RoPE tables, the embedding scale, the time embedding if still computed
    fold_constants,
    # the vision's patch-embedding convolution as one GEMM, positions in its bias table
    patch_embed_as_gemm,
    # attention as one scaled_dot_product_attention call per layer
    fuse_attention,
    # the prefix's MLP GEMMs in FP8 (last: it quantises the folded, merged weights)
    fp8_prefix_mlp,
]
PASS_NAMES = tuple(p.__name__ for p in PASSES)
# Passes that change the numbers beyond float rounding (each states its error in its details);
# the others keep the model's outputs to rounding and are checked that tight.
APPROXIMATE = ('fp8_prefix_mlp',)
