"""point_reach's entry point (a spec's `policy.entry`): the policy in lamp's control pipeline.

`policy.options` (all optional): camera (its slot name), image_size, horizon.
"""

from dataclasses import fields

from lamp_ros.api import check_keys, control_pipeline, SpecError


def pipeline_from_spec(spec, device: str = 'cpu'):
    from .policy import PointReachPolicy, ReachConfig

    options = dict(spec.policy['options'])
    check_keys(options, {f.name for f in fields(ReachConfig)}, 'policy.options')
    if 'file' in spec.weights:
        raise SpecError('weights.file: point_reach draws its weights from weights.seed')
    policy = PointReachPolicy(ReachConfig(**options), seed=int(spec.weights.get('seed', 0)))
    policy.locator.to(device)
    policy.controller.to(device)
    return control_pipeline(policy, spec.control)
