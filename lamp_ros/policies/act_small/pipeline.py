"""act_small's entry point (a spec's `policy.entry`): the policy in lamp's control pipeline.

`policy.options` (all optional): cameras (slot names), image_size, horizon, width, layers, grid,
keypoints.
`weights`: `seed` (random weights), or `file`: trained weights (safetensors) with their
`stats.json` beside them (scripts/train_demo_policy.py writes both).
"""

from dataclasses import fields

from lamp_ros.api import check_keys, control_pipeline, SpecError


def pipeline_from_spec(spec, device: str = 'cpu'):
    from lamp_ros.policies.act_small.policy import ActConfig, ActPolicy

    options = dict(spec.policy['options'])
    check_keys(options, {f.name for f in fields(ActConfig)}, 'policy.options')
    if 'cameras' in options:
        cameras = options['cameras']
        if not isinstance(cameras, list) or not cameras or \
                not all(isinstance(c, str) and c for c in cameras):
            raise SpecError(f'policy.options.cameras: a list of camera slot names, got '
                            f'{cameras!r}')
        options['cameras'] = tuple(cameras)
    if 'format' in spec.weights:
        raise SpecError('weights.format: act_small reads its own weights.file (safetensors), '
                        'not a checkpoint format')
    if 'file' in spec.weights:
        try:
            policy = ActPolicy.trained(ActConfig(**options), spec.resolve(spec.weights['file']))
        except (OSError, ValueError) as e:
            raise SpecError(f'weights.file: {e}') from e
    else:
        policy = ActPolicy.create(ActConfig(**options), seed=int(spec.weights.get('seed', 0)))
    policy.model.to(device)
    return control_pipeline(policy, spec.control)
