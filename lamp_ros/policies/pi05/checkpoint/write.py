"""Write a Pi05Model as a LeRobot 0.6.1 pi05 checkpoint folder: the layout `lamp import` reads.

A policy trained here (the demo policy, scripts/train_demo_policy.py) leaves as a LeRobot
checkpoint, so that it reaches an artifact by the same road as a user's: `lamp import`, then
`lamp compile`. The files are those LeRobot's `save_pretrained` writes for its policy and its
pre/post-processor pipelines: `config.json` (PI05Config's fields), `model.safetensors` (LeRobot's
tensor names, keys.REVERSE), `policy_preprocessor.json` / `policy_postprocessor.json` and the
normaliser stats beside them (`<feature>.<stat>` tensors). LeRobot's model also holds the two
`lm_head`s pi0.5 never uses (it decodes no text); they are written as LeRobot ties them
(PaliGemma's to the embedding) and zeros (the expert's), so the file is complete for LeRobot.
"""

from dataclasses import replace
import json
import os

import numpy as np
from safetensors.numpy import save_file as save_numpy
from safetensors.torch import save_file

from lamp_ros.policies.pi05.checkpoint import keys
from lamp_ros.policies.pi05.checkpoint.reader import GEMMA_HEAD_DIM, SIGLIP_HEADS

STATS = ('max', 'mean', 'min', 'q01', 'q10', 'q90', 'q99', 'std')
NORM_MAP = {'VISUAL': 'IDENTITY', 'STATE': 'QUANTILES', 'ACTION': 'QUANTILES'}
EPS = 1e-08
PRE_STATS = 'policy_preprocessor_step_3_normalizer_processor.safetensors'
POST_STATS = 'policy_postprocessor_step_0_unnormalizer_processor.safetensors'


def lerobot_heads(config):
    """`config` with the attention heads a LeRobot checkpoint can say: LeRobot's Gemma variants
    fix head_dim at 256 and SigLIP at 16 heads, so a reader of the file (LeRobot's, and lamp's
    own reader.py) knows them without being told. One Gemma head per layer keeps a small
    model small."""
    return replace(config, vision=replace(config.vision, num_heads=SIGLIP_HEADS),
                   llm=replace(config.llm, num_heads=1, num_kv_heads=1, head_dim=GEMMA_HEAD_DIM),
                   expert=replace(config.expert, num_heads=1, num_kv_heads=1,
                                  head_dim=GEMMA_HEAD_DIM))


def check_writable(config) -> None:
    """Refuse a model whose head layout a LeRobot checkpoint cannot say (lerobot_heads)."""
    wrong = [f'{part}.head_dim {getattr(config, part).head_dim}' for part in ('llm', 'expert')
             if getattr(config, part).head_dim != GEMMA_HEAD_DIM]
    if config.vision.num_heads != SIGLIP_HEADS:
        wrong.append(f'vision.num_heads {config.vision.num_heads}')
    if wrong:
        raise ValueError(f'{config.name}: {", ".join(wrong)}; a LeRobot pi05 checkpoint has '
                         f'Gemma head_dim {GEMMA_HEAD_DIM} and {SIGLIP_HEADS} SigLIP heads '
                         '(lerobot_heads() gives a model that layout)')


def feature_stats(values: np.ndarray) -> dict:
    """LeRobot's per-feature dataset stats of (N, D) values, as float32 vectors."""
    values = np.asarray(values, np.float64)
    quantiles = {f'q{int(q * 100):02d}': np.quantile(values, q, axis=0)
                 for q in (0.01, 0.10, 0.90, 0.99)}
    out = {'max': values.max(0), 'mean': values.mean(0), 'min': values.min(0),
           'std': values.std(0), **quantiles}
    return {k: out[k].astype(np.float32) for k in STATS}


def _features(cameras, image_size: int, joints: int) -> tuple:
    inputs = {f'observation.images.{c}': {'type': 'VISUAL', 'shape': [3, image_size, image_size]}
              for c in cameras}
    inputs['observation.state'] = {'type': 'STATE', 'shape': [joints]}
    return inputs, {'action': {'type': 'ACTION', 'shape': [joints]}}


def lerobot_config(config, joints: int, dtype: str) -> dict:
    """config.json: LeRobot's PI05Config with this model's cameras, joints and lengths."""
    inputs, outputs = _features(config.camera_slots, config.vision.image_size, joints)
    return {
        'type': 'pi05', 'n_obs_steps': 1, 'input_features': inputs, 'output_features': outputs,
        'device': 'cpu', 'use_amp': False, 'use_peft': False, 'push_to_hub': False,
        'repo_id': None, 'private': None, 'tags': None, 'license': None,
        'pretrained_path': None, 'pretrained_revision': None,
        'paligemma_variant': 'gemma_2b', 'action_expert_variant': 'gemma_300m', 'dtype': dtype,
        'chunk_size': config.action_horizon, 'n_action_steps': config.action_horizon,
        'max_state_dim': config.action_dim, 'max_action_dim': config.action_dim,
        'num_inference_steps': config.num_steps, 'time_sampling_beta_alpha': 1.5,
        'time_sampling_beta_beta': 1.0, 'time_sampling_scale': 0.999,
        'time_sampling_offset': 0.001, 'min_period': 0.004, 'max_period': 4.0,
        'use_relative_actions': False, 'relative_exclude_joints': ['gripper'],
        'action_feature_names': None, 'rtc_config': None,
        'image_resolution': [config.vision.image_size, config.vision.image_size],
        'empty_cameras': 0, 'tokenizer_max_length': config.max_token_len,
        'normalization_mapping': dict(NORM_MAP), 'gradient_checkpointing': False,
        'compile_model': False, 'compile_mode': 'max-autotune', 'freeze_vision_encoder': False,
        'train_expert_only': False, 'optimizer_lr': 2.5e-05, 'optimizer_betas': [0.9, 0.95],
        'optimizer_eps': 1e-08, 'optimizer_weight_decay': 0.01, 'optimizer_grad_clip_norm': 1.0,
        'scheduler_warmup_steps': 1000, 'scheduler_decay_steps': 30000,
        'scheduler_decay_lr': 2.5e-06,
    }


def processors(config, joints: int, tokenizer_name: str) -> tuple:
    """(policy_preprocessor.json, policy_postprocessor.json) as LeRobot's pi05 pipelines."""
    inputs, outputs = _features(config.camera_slots, config.vision.image_size, joints)
    device = {'registry_name': 'device_processor', 'config': {'device': 'cpu',
                                                              'float_dtype': None}}
    pre = {'name': 'policy_preprocessor', 'steps': [
        {'registry_name': 'rename_observations_processor', 'config': {'rename_map': {}}},
        {'registry_name': 'to_batch_processor', 'config': {}},
        {'registry_name': 'relative_actions_processor',
         'config': {'enabled': False, 'exclude_joints': ['gripper'], 'action_names': None}},
        {'registry_name': 'normalizer_processor',
         'config': {'eps': EPS, 'features': {**inputs, **outputs}, 'norm_map': dict(NORM_MAP)},
         'state_file': PRE_STATS},
        {'registry_name': 'pi05_prepare_state_tokenizer_processor_step', 'config': {}},
        {'registry_name': 'tokenizer_processor',
         'config': {'max_length': config.max_token_len, 'task_key': 'task',
                    'padding_side': 'right', 'padding': 'max_length', 'truncation': True,
                    'tokenizer_name': tokenizer_name}},
        device]}
    post = {'name': 'policy_postprocessor', 'steps': [
        {'registry_name': 'unnormalizer_processor',
         'config': {'eps': EPS, 'features': outputs, 'norm_map': dict(NORM_MAP)},
         'state_file': POST_STATS},
        {'registry_name': 'absolute_actions_processor', 'config': {'enabled': False}},
        device]}
    return pre, post


def write_lerobot(folder: str, model, stats: dict, tokenizer_name: str) -> list:
    """Write `model` (a Pi05Model) with `stats` ({'observation.state': ..., 'action': ...},
    each feature_stats()) as a LeRobot pi05 checkpoint in `folder`; returns the files."""
    config = model.cfg
    check_writable(config)
    joints = len(stats['action']['q01'])
    if len(stats['observation.state']['q01']) != joints:
        raise ValueError('state and action stats must cover the same joints')
    os.makedirs(folder, exist_ok=True)
    tensors = {keys.lerobot_name(name): p.detach().contiguous().cpu()
               for name, p in model.named_parameters()}
    embed = model.prefix.embed.weight.detach()
    tensors['model.' + keys.LM_HEAD] = embed.clone().contiguous()
    tensors['model.' + keys.UNUSED[1]] = embed.new_zeros(config.vocab_size, config.expert.width)
    dtype = str(embed.dtype).removeprefix('torch.')
    save_file(tensors, os.path.join(folder, 'model.safetensors'), metadata={'format': 'pt'})
    flat = {f'{feature}.{name}': np.asarray(value, np.float32)
            for feature, values in stats.items() for name, value in values.items()}
    pre, post = processors(config, joints, tokenizer_name)
    files = {'config.json': lerobot_config(config, joints, dtype),
             'policy_preprocessor.json': pre, 'policy_postprocessor.json': post}
    for name, content in files.items():
        with open(os.path.join(folder, name), 'w', encoding='utf-8') as f:
            json.dump(content, f, indent=4 if name == 'config.json' else 2)
    for name in (PRE_STATS, POST_STATS):
        save_numpy(flat, os.path.join(folder, name))
    return ['model.safetensors', *files, PRE_STATS, POST_STATS]
