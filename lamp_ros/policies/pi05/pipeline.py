"""The pi0.5 policy's entry point (a spec's `policy.entry`): the eager policy in its control
pipeline, both built from a validated spec and pi0.5's own `policy.options`."""

from lamp_ros.control import control_pipeline, ControlPipeline
from lamp_ros.spec import SpecError
from lamp_ros.spec.build_options import check_keys

GLUE = ('interpolation', 'noise_seed', 'prompt_format')
FROM_WEIGHTS = 'from_weights'


def pipeline_from_spec(spec, device: str = 'cpu') -> ControlPipeline:
    """Build the eager policy and its control pipeline. `policy.options`: `preset` (pi05_tiny,
    pi05_full, or from_weights: the model a checkpoint's tensors describe, `weights:` naming
    the checkpoint), `glue` (interpolation, noise_seed, prompt_format: GlueConfig), for a
    preset `num_steps` (the flow's Euler steps, 10 by default), and for a checkpoint
    `tokenizer` ({path, sha256}), `joint_names` and `dtype` (the eager model's; by default the
    dtype most of its weights are stored in)."""
    from lamp_ros.policies.pi05.policy import GlueConfig, Pi05Policy

    options = spec.policy['options']
    check_keys(options, {'preset', 'glue', 'tokenizer', 'joint_names', 'dtype', 'num_steps'},
               'policy.options')
    check_keys(options.get('glue', {}), GLUE, 'policy.options.glue')
    if 'preset' not in options:
        raise SpecError('policy.options.preset: missing (pi05_tiny, pi05_full or from_weights)')
    weights = spec.weights
    if options['preset'] == FROM_WEIGHTS:
        if 'num_steps' in options:
            raise SpecError('policy.options.num_steps: a preset\'s only (a checkpoint runs the '
                            'flow steps it was trained with)')
        return control_pipeline(_from_checkpoint(spec, options, device), spec.control)
    for key in ('tokenizer', 'joint_names', 'dtype'):
        if key in options:
            raise SpecError(f'policy.options.{key}: only with preset {FROM_WEIGHTS} (a preset '
                            'brings its own)')
    steps = options.get('num_steps', 10)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise SpecError(f'policy.options.num_steps: the flow\'s Euler steps, an integer >= 1, '
                        f'got {steps!r}')
    if 'format' in weights:
        raise SpecError(f'weights: a checkpoint needs policy.options.preset {FROM_WEIGHTS}')
    file = spec.resolve(weights['file']) if 'file' in weights else None
    policy = Pi05Policy.create(options['preset'], seed=int(weights.get('seed', 0)), weights=file,
                               num_steps=steps,
                               stage_seeds=weights.get('stage_seeds') or None,
                               glue=GlueConfig(**options.get('glue', {})), device=device,
                               robot=_robot_io(spec))
    return control_pipeline(policy, spec.control)


def _robot_io(spec, checkpoint=None):
    """The spec's robot as the policy's joints and normalisation: its joint names, and its
    norm stats (openpi's norm_stats.json layout) when it names them, else the checkpoint's or
    the preset's own. None without a robot."""
    from lamp_ros.ops.normalize import NormStats
    from lamp_ros.policies.pi05 import assets
    from lamp_ros.policies.pi05.checkpoint.reader import CheckpointError, openpi_norm_stats
    from lamp_ros.policies.pi05.policy import RobotIO

    robot = spec.robot
    if robot is None:
        return None
    names = robot.joint_names
    try:
        if robot.norm_stats:
            return RobotIO(names, *openpi_norm_stats(robot.norm_stats, len(names)))
        if checkpoint is not None:
            return RobotIO(names, checkpoint.state, checkpoint.actions)
        return RobotIO.from_norm_stats(NormStats.load(assets.norm_stats_path()), names)
    except (CheckpointError, ValueError) as exc:
        raise SpecError(f'robot: {exc}') from exc


def _from_checkpoint(spec, options: dict, device: str):
    """The policy of a LeRobot / openpi checkpoint named by `weights: {format, path}`."""
    from lamp_ros.ops.tokenizer import Tokenizer
    from lamp_ros.policies.pi05.checkpoint.reader import open_checkpoint
    from lamp_ros.policies.pi05.policy import DTYPES, GlueConfig, Pi05Policy

    weights = spec.weights
    if 'format' not in weights:
        raise SpecError(f'weights: preset {FROM_WEIGHTS} needs a checkpoint (format, path)')
    tokenizer = options.get('tokenizer')
    if not isinstance(tokenizer, dict) or 'path' not in tokenizer:
        raise SpecError('policy.options.tokenizer: {path, sha256} of the sentencepiece model '
                        'the checkpoint was trained with')
    check_keys(tokenizer, {'path', 'sha256'}, 'policy.options.tokenizer')
    path = spec.resolve(tokenizer['path'])
    if 'sha256' in tokenizer and Tokenizer(path).sha256 != tokenizer['sha256']:
        raise SpecError(f'policy.options.tokenizer: {path} has sha256 '
                        f'{Tokenizer(path).sha256[:12]}, the spec names '
                        f'{tokenizer["sha256"][:12]}')
    ckpt = open_checkpoint(spec.resolve(weights['path']), weights['format'],
                           weights.get('asset_id'), name=spec.name)
    glue = {'prompt_format': ckpt.prompt_format, **options.get('glue', {})}
    dtype = options.get('dtype', ckpt.dtype)
    if dtype not in DTYPES:
        raise SpecError(f'policy.options.dtype: {dtype!r}; one of {", ".join(DTYPES)}')
    if spec.robot is not None and 'joint_names' in options:
        raise SpecError('policy.options.joint_names: the robot section names the joints')
    return Pi05Policy.from_checkpoint(ckpt, path, options.get('joint_names'),
                                      GlueConfig(**glue), device, dtype,
                                      robot=_robot_io(spec, ckpt))
