"""What a policy author uses to bring their own policy (docs/own-policy.md), in one place.

- `PolicyInterface`: what the policy takes (cameras, joints, prompt or not, action horizon).
- `stage`, `model_stage`: mark the steps of `infer` (host glue, torch model stages) so the
  tracer records the pipeline; the marks change nothing when the policy runs eagerly.
  `as_numpy`: a model stage's result (a tensor when eager, numpy when compiled) for glue.
- `host_op`: register the run-time implementation of a host stage (numpy glue), in a module
  of the policy's own that does not import torch; the artifact records that module and the
  sha256 of its source, and the robot imports it when it loads the artifact.
- `control_pipeline`: the policy inside lamp's chunker -> smoother -> safety clamp, from the
  spec's `control:` section; what a spec's `policy.entry` function usually returns.
- `register_rewrites`, `Rewrites`, `PassResult`: optional graph passes and a cuda lowering
  for the policy's model stages.
- `check_keys`, `SpecError`: validate the policy's own `policy.options`.
- `preprocess_image`, `stack_cameras`, `standardize`, `unstandardize`, `MeanStdStats`: what
  lamp's host operators of those names compute, for the eager method of a stage that names
  one (the artifact runs the operator; the eager policy calls the same function).

Importing this module imports no torch, so a policy's glue module may import it too.
"""

from lamp_ros.compiler.rewrites import PassResult, register_rewrites, Rewrites
from lamp_ros.control import control_pipeline, ControlPipeline
from lamp_ros.observation import DEFAULT_PROMPT, PolicyInterface
from lamp_ros.ops.image import preprocess_image, stack_cameras
from lamp_ros.ops.registry import host_op
from lamp_ros.ops.standardize import MeanStdStats, standardize, unstandardize
from lamp_ros.spec import SpecError
from lamp_ros.spec.build_options import check_keys
from lamp_ros.trace.stage import as_numpy, model_stage, stage

__all__ = ['ControlPipeline', 'DEFAULT_PROMPT', 'MeanStdStats', 'PassResult', 'PolicyInterface',
           'Rewrites', 'SpecError', 'as_numpy', 'check_keys', 'control_pipeline', 'host_op',
           'model_stage', 'preprocess_image', 'register_rewrites', 'stack_cameras', 'stage',
           'standardize', 'unstandardize']
