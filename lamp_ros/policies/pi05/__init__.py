"""pi0.5 as one policy package: the eager model and its glue (policy.py), presets, weights,
example observations, the entry a spec names (pipeline.py: pipeline_from_spec), and what it
adds to the compiler: its stages in the passes' form (staged/), its graph passes (passes/) and
its cuda lowering (cuda/), registered here through the compiler's one hook."""

from lamp_ros.compiler.rewrites import register_rewrites
from lamp_ros.policies.pi05.policy import Pi05Policy
from lamp_ros.policies.pi05.rewrites import REWRITES

register_rewrites(Pi05Policy, REWRITES)
