"""Dynamic tracer: run the policy once on an example observation, get the stage-level Graph."""

from lamp_ros.trace.stage import model_stage, stage, StageSpec  # noqa: F401
