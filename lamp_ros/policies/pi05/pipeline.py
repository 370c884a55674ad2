"""The pi0.5 policy's entry point (a spec's `policy.entry`): the eager policy in its control
pipeline, both built from a validated spec and pi0.5's own `policy.options`."""

from lamp_ros.control import control_pipeline, ControlPipeline
from lamp_ros.spec import SpecError
from lamp_ros.spec.build_options import check_keys

GLUE = ('interpolation', 'noise_seed')


def pipeline_from_spec(spec, device: str = 'cpu') -> ControlPipeline:
    """Build the eager policy and its control pipeline. `policy.options`: `preset` (pi05_tiny,
    pi05_full) and `glue` (interpolation, noise_seed: GlueConfig)."""
    from lamp_ros.policies.pi05.policy import GlueConfig, Pi05Policy

    options = spec.policy['options']
    check_keys(options, {'preset', 'glue'}, 'policy.options')
    check_keys(options.get('glue', {}), GLUE, 'policy.options.glue')
    if 'preset' not in options:
        raise SpecError('policy.options.preset: missing (pi05_tiny or pi05_full)')
    weights = spec.weights
    policy = Pi05Policy.create(options['preset'], seed=int(weights.get('seed', 0)),
                               weights=weights.get('file'),
                               stage_seeds=weights.get('stage_seeds') or None,
                               glue=GlueConfig(**options.get('glue', {})), device=device)
    return control_pipeline(policy, spec.control)
