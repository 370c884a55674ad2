"""Every key a model spec may hold, in one list: the parser checks each mapping of a spec
against its entry here (check_keys), and docs/spec.md's table of keys is tested against it
(test/spec/test_spec_doc.py), so a key the parser learns without a line in the docs fails a
test instead of surprising a user.

SPEC_KEYS maps the path of a mapping ('' is the spec itself) to the keys it accepts. A path
part in angle brackets stands for a name the spec chooses (a stage op, a camera slot), `[]`
for each item of a list. No entry here: mappings whose keys are names of the spec's own choice
(`stages`, `passes`, `weights.stage_seeds`, `fusion.device_letterbox`, `robot.cameras`), and
those another part of lamp_ros checks (`policy.options`: the policy's entry function;
`control.chunker`, `control.smoother`, `control.clamp`: the control operators, lamp_ros/ops).
"""

from lamp_ros.spec.build_options import BuildOptions

SPEC_KEYS = {
    '': ('schema', 'name', 'policy', 'weights', 'control', 'target', 'stages', 'fusion',
         'parity', 'passes', 'build', 'robot', 'precision'),
    'policy': ('entry', 'options'),
    'weights': ('seed', 'stage_seeds', 'file', 'format', 'path', 'asset_id'),
    'control': ('rate_hz', 'chunker', 'smoother', 'clamp'),
    'stages.<stage>': ('backend', 'precision', 'fallback', 'reason'),
    'fusion': ('fuse_adjacent', 'split_after', 'side_stream', 'text_lengths',
               'device_letterbox'),
    'parity': ('samples', 'atol', 'rtol', 'missing_camera'),
    'build': tuple(BuildOptions.__dataclass_fields__),  # how the backends build
    'precision': ('plan', 'budget', 'calibration', 'lower_loop_state'),
    'precision.budget': ('cosine', 'max_rel'),
    'precision.calibration': ('source', 'path', 'samples'),
    'robot': ('name', 'joints', 'urdf', 'action', 'norm_stats', 'cameras'),
    'robot.joints[]': ('name', 'lower', 'upper', 'max_step'),
    'robot.cameras.<slot>': ('topic', 'encoding', 'width', 'height'),
    'robot.action': ('kind', 'mask'),
}

# `robot: {file: path}`, the one key then: a robot file (config/robots/) holding the keys of
# 'robot' above, read relative to the spec's folder (spec/robot.py).
ROBOT_FILE = 'file'

# The keys whose values are paths, read relative to the folder of the file that holds them: the
# spec's (spec.resolve, spec/robot.py, compiler/precision_plan.py, pi0.5's tokenizer), or for the
# robot's own keys, the robot file's. spec/edit.py makes them absolute in a copy written
# elsewhere. A policy's own options (policy.options) may name paths the core does not know of:
# the policy resolves those with spec.resolve, and only pi0.5's tokenizer is listed here.
PATH_KEYS = ('weights.file', 'weights.path', 'robot.file', 'robot.urdf', 'robot.norm_stats',
             'precision.calibration.path', 'policy.options.tokenizer.path')
