"""`lamp import`: a LeRobot or openpi pi0.5 checkpoint folder -> a report and a model spec.

The spec names the checkpoint (`weights: {format, path}`), `policy.options.preset:
from_weights` (the model the tensors describe), the tokenizer by path and sha256 and the joint
names, so `lamp compile SPEC` builds it as it is. Paths in the spec are relative to the spec's
folder. Nothing here reads tensor data: the report comes from the headers and the small files;
the tokenizer is checked against the embedding's row count.
"""

from dataclasses import dataclass
import os

import numpy as np
import yaml

from lamp_ros.ops.tokenizer import Tokenizer
from lamp_ros.policies.pi05.checkpoint.reader import (check_tokenizer, Checkpoint,
                                                      CheckpointError, detect_format,
                                                      open_checkpoint)

ENTRY = 'lamp_ros.policies.pi05.pipeline:pipeline_from_spec'
STAGES = {
    'cpu': {'backend': 'onnxruntime', 'precision': 'fp32',
            'reason': 'exported to ONNX and run by ONNX Runtime on the CPU'},
    'cuda': {'backend': 'cuda', 'precision': 'bf16',
             'reason': 'bf16 on the GPU; vision, prefix and denoise in one CUDA graph'},
}
PARITY = {'cpu': {'samples': 2, 'atol': 1.0e-4, 'rtol': 1.0e-3},
          'cuda': {'samples': 2, 'atol': 5.0e-2, 'rtol': 5.0e-2}}
CLAMP_STEP = 0.05   # max step per tick as a share of the action range (a cautious default)


@dataclass(frozen=True)
class Importer:
    """One checkpoint format `lamp import` knows (setup.py: lamp_ros.checkpoint_formats)."""

    format: str

    def detect(self, root: str) -> bool:
        try:
            return detect_format(root) == self.format
        except CheckpointError:
            return False

    def run(self, root: str, tokenizer: str, joint_names=None, out: str | None = None,
            asset_id: str | None = None, target: str = 'cpu', say=print,
            robot: str | None = None) -> dict:
        return import_checkpoint(root, tokenizer, self.format, joint_names, out, asset_id,
                                 target, say, robot)


LEROBOT = Importer('lerobot')
OPENPI = Importer('openpi')


def _vector(values) -> str:
    values = np.asarray(values, np.float64)
    return '[' + ', '.join(f'{v:.4g}' for v in values) + ']'


def report_lines(ckpt: Checkpoint, tokenizer: Tokenizer) -> list:
    c = ckpt.config
    lines = [
        f'format        {ckpt.format} ({ckpt.root})',
        f'model         pi0.5: vision {c.vision.depth}x{c.vision.width} (patch '
        f'{c.vision.patch_size}, {c.vision.image_size} px, mlp {c.vision.mlp_dim}), prefix '
        f'{c.llm.depth}x{c.llm.width} (mlp {c.llm.mlp_dim}, {c.llm.num_heads} heads, '
        f'{c.llm.num_kv_heads} kv, head_dim {c.llm.head_dim}), expert {c.expert.depth}x'
        f'{c.expert.width} (mlp {c.expert.mlp_dim}); vocab {c.vocab_size}',
        f'weights       {ckpt.dtype}, {ckpt.parameters() / 1e6:.2f} M parameters read '
        f'(never read: {", ".join(ckpt.skipped) or "nothing"})',
        f'cameras       {", ".join(c.camera_slots)} (token order)',
        f'state/action  {ckpt.joints} joints (model action dim {c.action_dim}), horizon '
        f'{c.action_horizon}, {c.num_steps} flow steps',
    ]
    for name, norm in (('state', ckpt.state), ('actions', ckpt.actions)):
        stats = ', '.join(f'{k} {_vector(v)}' for k, v in norm.stats.items())
        lines.append(f'{name:<13} {norm.mode.upper()} ({norm.convention} eps): {stats}')
    lines += [
        f'prompt        {ckpt.prompt_format} format, up to {c.max_token_len} tokens',
        f'tokenizer     {tokenizer.model_path}: {tokenizer.vocab_size} pieces, sha256 '
        f'{tokenizer.sha256}',
    ]
    lines += [f'note          {note}' for note in ckpt.notes]
    return lines


def _relative(path: str, spec_dir: str) -> str:
    return os.path.relpath(os.path.abspath(path), spec_dir)


def spec_dict(ckpt: Checkpoint, tokenizer: Tokenizer, names, spec_path: str, target: str,
              asset_id: str | None, robot_file: str | None = None) -> dict:
    spec_dir = os.path.dirname(os.path.abspath(spec_path))
    low, high = ckpt.actions.typical_range(ckpt.joints)
    span = np.asarray(high, np.float64) - np.asarray(low, np.float64)
    weights = {'format': ckpt.format, 'path': _relative(ckpt.root, spec_dir)}
    if ckpt.format == 'openpi':
        weights['asset_id'] = ckpt.glue['asset_id'] if asset_id is None else asset_id
    stage = STAGES[target]
    spec = {
        'schema': 'lamp.spec/1',
        'name': os.path.splitext(os.path.basename(spec_path))[0],
        'policy': {'entry': ENTRY, 'options': {
            'preset': 'from_weights',
            'tokenizer': {'path': _relative(tokenizer.model_path, spec_dir),
                          'sha256': tokenizer.sha256},
            'joint_names': list(names),
            # the eager reference the artifact is checked against: float32 for the CPU (ONNX
            # Runtime's CPU provider has no bf16 kernels; bf16 -> fp32 is exact), else the
            # dtype the weights are stored in; each stage is cast to its own precision
            'dtype': 'float32' if target == 'cpu' else ckpt.dtype,
            'glue': {'prompt_format': ckpt.prompt_format, 'interpolation': 'linear',
                     'noise_seed': 0}}},
        'weights': weights,
        'control': {'rate_hz': 22.0,
                    'chunker': {'replan_at': max(1, ckpt.config.action_horizon // 2),
                                'merge_mode': 'temporal_ensemble', 'ensemble_m': 0.01},
                    'smoother': {'mode': 'none'},
                    'clamp': {'lower': [round(float(v), 6) for v in low],
                              'upper': [round(float(v), 6) for v in high],
                              'max_step': [round(float(v) * CLAMP_STEP, 6) for v in span]}},
        'target': target,
        'stages': {'default': {'backend': 'host', 'reason': 'numpy/OpenCV/sentencepiece '
                                                            'reference operators'},
                   **{name: dict(stage) for name in ('vision', 'prefix', 'denoise')}},
        'fusion': {'fuse_adjacent': True},
        'passes': {name: True for name in (
            'fold_norm_affine', 'merge_projections', 'precompute_time_conditioning',
            'remove_unread_work', 'fold_euler_update', 'fold_constants', 'patch_embed_as_gemm',
            'fuse_attention')},
        'build': {'onnx_exporter': 'torchscript'} if target == 'cpu' else {},
        'parity': PARITY[target],
    }
    if robot_file:  # the robot names the joints and sets the clamp's limits
        del spec['policy']['options']['joint_names']
        del spec['control']['clamp']
        spec['robot'] = {'file': _relative(robot_file, spec_dir)}
    return spec


HEADER = """\
# Model spec of the {format} checkpoint {root}, written by `lamp import`.
# The model's shapes come from the checkpoint's tensors (preset: from_weights); paths are
# relative to this file. Without a robot file (--robot), control.clamp is the range of the
# actions in the checkpoint's stats and max_step {step:.0%} of it per tick: describe your robot
# (docs/robot.md) before it drives hardware.
"""


def import_checkpoint(root: str, tokenizer: str, fmt: str | None = None, joint_names=None,
                      out: str | None = None, asset_id: str | None = None,
                      target: str = 'cpu', say=print, robot: str | None = None) -> dict:
    """Check the checkpoint and the tokenizer, print the report, write the spec; return
    {'spec': path, 'checkpoint': Checkpoint}. `robot`: a robot file (spec/robot.py) the spec
    names: its joints and limits, its cameras; the checkpoint's norm stats stay unless the
    robot file names its own."""
    if target not in STAGES:
        raise CheckpointError(f'target {target!r}; known: {", ".join(STAGES)}')
    ckpt = open_checkpoint(root, fmt, asset_id)
    tok = Tokenizer(tokenizer)
    check_tokenizer(tok, ckpt)
    if robot:
        if joint_names:
            raise CheckpointError('--joint-names: the robot file names the joints')
        from lamp_ros.spec.robot import parse_robot
        arm = parse_robot({'file': os.path.abspath(robot)}, os.getcwd(), 22.0)
        if len(arm.joints) != ckpt.joints:
            raise CheckpointError(f'--robot {robot}: {len(arm.joints)} joints '
                                  f'{list(arm.joint_names)}; the checkpoint has {ckpt.joints}')
        unknown = sorted(set(arm.cameras) - set(ckpt.config.camera_slots))
        if unknown:
            raise CheckpointError(f'--robot {robot}: cameras {unknown} are not slots of the '
                                  f'checkpoint ({", ".join(ckpt.config.camera_slots)})')
        joint_names = arm.joint_names
    names = list(joint_names or (f'joint{i}' for i in range(ckpt.joints)))
    if len(names) != ckpt.joints or len(set(names)) != len(names):
        raise CheckpointError(f'--joint-names: {len(names)} names {names}; the checkpoint has '
                              f'{ckpt.joints} joints (distinct names, action-vector order)')
    for line in report_lines(ckpt, tok):
        say(line)
    out = out or f'{os.path.basename(ckpt.root.rstrip(os.sep))}.yaml'
    spec = spec_dict(ckpt, tok, names, out, target, asset_id, robot)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, 'w', encoding='utf-8') as f:
        f.write(HEADER.format(format=ckpt.format, root=os.path.basename(ckpt.root),
                              step=CLAMP_STEP))
        yaml.safe_dump(spec, f, sort_keys=False, default_flow_style=None, width=100)
    say(f'spec          {out}  (next: lamp compile {out} --out artifacts/{spec["name"]})')
    return {'spec': out, 'checkpoint': ckpt}
