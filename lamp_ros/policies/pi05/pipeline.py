"""The pi0.5 policy's entry point (a spec's `policy.entry`): the eager policy in its control
pipeline, both built from a validated spec."""

from lamp_ros.control import ControlPipeline
from lamp_ros.ops.chunker import ActionChunker
from lamp_ros.ops.clamp import SafetyClamp
from lamp_ros.ops.smoother import Smoother


def pipeline_from_spec(spec, device: str = 'cpu') -> ControlPipeline:
    """Build the eager policy and its control pipeline from a validated Spec."""
    from lamp_ros.policies.pi05.policy import GlueConfig, Pi05Policy

    glue = GlueConfig(**spec.policy.get('glue', {}))
    weights = spec.weights
    policy = Pi05Policy.create(spec.policy['preset'], seed=int(weights.get('seed', 0)),
                               weights=weights.get('file'),
                               stage_seeds=weights.get('stage_seeds') or None, glue=glue,
                               device=device)
    joints = len(policy.joint_names)
    control = spec.control
    rate_hz = float(control['rate_hz'])
    chunker = ActionChunker.from_dict({
        'horizon': policy.config.action_horizon, 'joints': joints, 'dt': 1.0 / rate_hz,
        **control.get('chunker', {})})
    smoother = Smoother.from_dict({'joints': joints, **control.get('smoother', {})})
    clamp = SafetyClamp.from_dict(control['clamp'])
    return ControlPipeline(policy, chunker, smoother, clamp, rate_hz)
