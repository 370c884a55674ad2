#!/usr/bin/env python3
"""Train a demo policy from demonstrations, on a CPU: a tiny pi0.5, or act_small.

With `--dataset DIR` it trains on a LeRobot dataset (what `lamp dataset` writes from recorded
episodes: the MuJoCo world's expert, docs/demo-policy.md); without, on the 2D scene's scripted
demonstrations (the unit tests' fixture policy, assets/sim7_reach).

pi0.5 (`--policy pi05`, the default):
1. The demonstrations: the dataset's frames (lamp_ros/dataset/samples.py: each frame's
   observation and the chunk of the next 50 commands), or disturbed expert episodes of the 2D
   scene (lamp_ros/sim/demonstrations.py; no ROS).
2. Norm stats from the demonstrations (LeRobot's per-feature stats; the openpi
   `norm_stats.json` layout is written beside them).
3. Train with the flow-matching loss and real-time chunking's random delays
   (lamp_ros/policies/pi05/training.py), through the policy's own host stages.
4. Write the result as a LeRobot pi05 checkpoint (checkpoint/write.py): the demo's artifact is
   then built the way a user's checkpoint is, `lamp import` and `lamp compile`
   (config/specs/pi05_tiny.yaml names it). Also `training.json` (settings, time, loss, the
   weights' sha256) and `loss.png`.

The model is pi05_tiny's depth and widths with the head layout a LeRobot checkpoint can say:
LeRobot's Gemma variants fix head_dim at 256 and SigLIP at 16 heads, and the importer reads the
head counts that way (checkpoint/reader.py), so the demo has one 256-wide head per layer
instead of pi05_tiny's four of 32 (checkpoint/write.py `lerobot_heads`). Deterministic from
--seed at a given --threads on one machine: same seed, same weights hash.

act_small (`--policy act_small`, needs `--dataset`): L1 behaviour cloning of the standardised
chunks (lamp_ros/policies/act_small/training.py), written as `model.safetensors` + `stats.json`
+ `config.json` (its spec options), which a spec names as `weights: {file: .../model.safetensors}`.

    python scripts/train_demo_policy.py            # the 2D scene's: about 8 minutes on two cores
    python scripts/train_demo_policy.py --dataset datasets/viperx_demos \
        --out lamp_ros/policies/pi05/assets/viperx_pick_place
    python scripts/train_demo_policy.py --dataset datasets/viperx_demos --policy act_small \
        --out lamp_ros/policies/act_small/assets/viperx_pick_place
"""

import argparse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, replace
import hashlib
import json
import os
import shutil
import sys
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from lamp_ros.dataset.reader import read_dataset  # noqa: E402
from lamp_ros.dataset.samples import chunk_samples, IMAGE_PREFIX  # noqa: E402
from lamp_ros.ops.normalize import Normalizer  # noqa: E402
from lamp_ros.ops.tokenizer import Tokenizer  # noqa: E402
from lamp_ros.policies.pi05.checkpoint.write import (feature_stats, lerobot_heads,  # noqa: E402
                                                     write_lerobot)
from lamp_ros.policies.pi05.config import get_preset  # noqa: E402
from lamp_ros.policies.pi05.model import Pi05Model  # noqa: E402
from lamp_ros.policies.pi05.policy import GlueConfig, Pi05Policy, RobotIO  # noqa: E402
from lamp_ros.policies.pi05.training import train  # noqa: E402
from lamp_ros.policies.training import TrainConfig  # noqa: E402
from lamp_ros.policies.pi05.weights import init_weights  # noqa: E402
from lamp_ros.sim.demonstrations import collect  # noqa: E402
from lamp_ros.spec.robot import parse_robot  # noqa: E402

OUT = os.path.join(ROOT, 'lamp_ros', 'policies', 'pi05', 'assets', 'sim7_reach')
ROBOT = os.path.join(ROOT, 'config', 'robots', 'sim7.yaml')
RATE_HZ = 22.0
MAX_TOKENS = 64          # the prompt with a 7-joint state is 52 tokens
# The tokenizer is PaliGemma's layout (pad 0, eos 1, bos 2, unk 3) trained on lamp's corpus
# (scripts/fixtures/make_pi05_checkpoints.py makes it): LeRobot's GemmaTokenizer reads it as it
# reads PaliGemma's. It lives beside the checkpoint; the checkpoint names it as LeRobot's do.
TOKENIZER = os.path.join(OUT, 'tokenizer.model')
TOKENIZER_NAME = 'tokenizer.model (beside this checkpoint: 512 pieces, PaliGemma layout)'


def batches(demos, size: int, seed: int, workers: int = 1):
    """(observations, chunks) batches of random samples, rendered one batch ahead on a thread
    (OpenCV releases the GIL); the order of samples depends on the seed only."""
    rng = np.random.default_rng([seed, 2])

    def make(indices):
        return [demos.observation(int(i)) for i in indices], demos.actions[indices]

    with ThreadPoolExecutor(max_workers=workers) as pool:
        ahead = pool.submit(make, rng.integers(0, len(demos), size))
        while True:
            current = ahead.result()
            ahead = pool.submit(make, rng.integers(0, len(demos), size))
            yield current


def loss_plot(losses, path: str, title: str) -> None:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    losses = np.asarray(losses)
    window = max(1, len(losses) // 100)
    smooth = np.convolve(losses, np.ones(window) / window, mode='valid')
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot(losses, lw=0.5, color='0.75', label='step')
    ax.plot(np.arange(window - 1, len(losses)), smooth, color='tab:blue',
            label=f'mean of {window}')
    ax.set(yscale='log', xlabel='step', ylabel='flow-matching loss', title=title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def sha256_of(path: str) -> str:
    with open(path, 'rb') as f:
        return hashlib.sha256(f.read()).hexdigest()


def progress_printer(every: int):
    start = time.perf_counter()

    def report(step, total, loss):
        if step % every == 0 or step == total:
            rate = step / (time.perf_counter() - start)
            print(f'step {step}/{total}  loss {loss:.4f}  {rate:.2f} steps/s  '
                  f'eta {(total - step) / rate:.0f} s', flush=True)
    return report


def write_summary(out: str, cfg: TrainConfig, losses, extra: dict, seconds: float, threads: int,
                  title: str) -> str:
    """training.json (settings, time, the loss every 10 steps, the weights' sha256) and loss.png;
    returns the weights' sha256."""
    weights_sha = sha256_of(os.path.join(out, 'model.safetensors'))
    loss_plot(losses, os.path.join(out, 'loss.png'), title)
    summary = {'train': asdict(cfg), **extra, 'threads': threads, 'seconds': round(seconds, 1),
               'final_loss': float(np.mean(losses[-50:])), 'model_sha256': weights_sha,
               'torch': torch.__version__,
               'losses_every_10': [round(x, 5) for x in losses[::10]]}
    with open(os.path.join(out, 'training.json'), 'w', encoding='utf-8') as f:
        json.dump(summary, f, indent=1)
    return weights_sha


def dataset_name(path: str) -> str:
    """The dataset as training.json records it: its folder's name (no machine path)."""
    return os.path.basename(os.path.normpath(path))


def dataset_samples(dataset, horizon: int, keep_idle: int, image_size: int | None = None):
    print(f'dataset {dataset.root}: {len(dataset.episodes)} episodes, {len(dataset):,} frames at '
          f'{dataset.fps} fps, tasks {dataset.tasks}', flush=True)

    def decoded(done, total):
        print(f'decoding images: {done:,}/{total:,} frames', flush=True)
    samples = chunk_samples(dataset, horizon, image_size, keep_idle, progress=decoded)
    print(f'{len(samples):,} samples: each episode\'s still end cut to {keep_idle} frames',
          flush=True)
    return samples


def train_pi05(args) -> tuple:
    """-> (cfg, losses, extra summary, files written)."""
    config = lerobot_heads(replace(get_preset('pi05_tiny'), max_token_len=MAX_TOKENS))
    if args.dataset:
        dataset = read_dataset(args.dataset)
        demos = dataset_samples(dataset, config.action_horizon, args.keep_idle)
        robot = parse_robot({'file': args.robot}, ROOT, float(dataset.fps))
        names = list(dataset.info['features']['action']['names'])
        if names != list(robot.joint_names):
            raise SystemExit(f'{args.dataset}: action names {names}, robot {args.robot} has '
                             f'{list(robot.joint_names)}')
        source = {'dataset': dataset_name(args.dataset), 'episodes':
                  len(dataset.episodes), 'keep_idle': args.keep_idle}
    else:
        robot = parse_robot({'file': ROBOT}, ROOT, RATE_HZ)
        max_step = [j.max_step for j in robot.joints]

        def collected(done, total):
            if done % 50 == 0 or done == total:
                print(f'demonstrations: {done}/{total} episodes', flush=True)

        limits = ([j.lower for j in robot.joints], [j.upper for j in robot.joints])
        demos = collect(args.episodes, 1000 + args.seed, RATE_HZ, max_step,
                        config.action_horizon, limits, progress=collected)
        source = {'episodes': args.episodes}
    stats = {'observation.state': feature_stats(demos.q),
             'action': feature_stats(demos.actions[:, 0])}
    normalizers = [Normalizer('quantiles', {k: stats[f][k] for k in ('q01', 'q99')}, 'lerobot')
                   for f in ('observation.state', 'action')]
    model = Pi05Model(config)
    init_weights(model, args.seed)
    policy = Pi05Policy(config, model, Tokenizer(args.tokenizer),
                        RobotIO(robot.joint_names, *normalizers),
                        GlueConfig(prompt_format='lerobot'))
    cfg = TrainConfig(steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                      max_delay=args.max_delay, seed=args.seed)
    print(f'training pi05 ({sum(p.numel() for p in model.parameters()):,} parameters) on '
          f'{len(demos):,} samples: {cfg.steps} steps of {cfg.batch_size}', flush=True)
    losses = train(policy, batches(demos, cfg.batch_size, args.seed), cfg,
                   progress=progress_printer(50))
    files = write_lerobot(args.out, model, stats, TOKENIZER_NAME)
    beside = os.path.join(args.out, 'tokenizer.model')
    if os.path.abspath(args.tokenizer) != os.path.abspath(beside):  # the checkpoint names it
        shutil.copyfile(args.tokenizer, beside)
    norm_stats = {'norm_stats': {
        key: {s: stats[feature][s].tolist() for s in ('mean', 'std', 'q01', 'q99')}
        for key, feature in (('state', 'observation.state'), ('actions', 'action'))}}
    with open(os.path.join(args.out, 'norm_stats.json'), 'w', encoding='utf-8') as f:
        json.dump(norm_stats, f, indent=1)
    extra = {**source, 'samples': len(demos), 'tokenizer_sha256': policy.tokenizer.sha256}
    return cfg, losses, extra, files + ['norm_stats.json']


def train_act(args) -> tuple:
    """-> (cfg, losses, extra summary, files written)."""
    from safetensors.torch import save_file
    from lamp_ros.policies.act_small import training as act_training
    from lamp_ros.policies.act_small.policy import ActConfig, ActPolicy

    if not args.dataset:
        raise SystemExit('--policy act_small trains on a --dataset')
    dataset = read_dataset(args.dataset)   # read once: the cameras, then the samples
    cameras = tuple(k.removeprefix(IMAGE_PREFIX) for k in dataset.image_keys
                    if k.startswith(IMAGE_PREFIX))
    config = ActConfig(cameras=cameras, image_size=args.image_size, horizon=50,
                       width=args.width, layers=args.layers, grid=args.grid,
                       keypoints=args.keypoints)
    samples = dataset_samples(dataset, config.horizon, args.keep_idle, config.image_size)
    names = list(dataset.info['features']['action']['names'])
    std_floor = 1e-2   # a joint the expert barely moves is not scaled up into noise

    def mean_std(values):
        return {'mean': values.mean(0).tolist(),
                'std': np.maximum(values.std(0), std_floor).tolist()}
    stats = {'joint_names': names, 'state': mean_std(samples.q.astype(np.float64)),
             'actions': mean_std(samples.actions.reshape(-1, len(names)).astype(np.float64))}
    policy = ActPolicy(config, stats, seed=args.seed)
    cfg = TrainConfig(steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                      warmup_steps=min(500, args.steps // 10), max_delay=0, seed=args.seed)
    print(f'training act_small ({sum(p.numel() for p in policy.model.parameters()):,} '
          f'parameters, {config}) on {len(samples):,} samples: {cfg.steps} steps of '
          f'{cfg.batch_size}', flush=True)
    losses = act_training.train(policy, samples, cfg, shift=args.shift,
                                progress=progress_printer(100))
    os.makedirs(args.out, exist_ok=True)
    save_file({k: v.contiguous() for k, v in policy.model.state_dict().items()},
              os.path.join(args.out, 'model.safetensors'), metadata={'format': 'pt'})
    with open(os.path.join(args.out, 'stats.json'), 'w', encoding='utf-8') as f:
        json.dump(stats, f, indent=1)
    options = {**asdict(config), 'cameras': list(config.cameras)}
    with open(os.path.join(args.out, 'config.json'), 'w', encoding='utf-8') as f:
        json.dump({'type': 'act_small', 'options': options}, f, indent=1)
    extra = {'dataset': dataset_name(args.dataset), 'episodes': len(dataset.episodes),
             'samples': len(samples), 'keep_idle': args.keep_idle, 'shift': args.shift}
    return cfg, losses, extra, ['model.safetensors', 'stats.json', 'config.json']


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--policy', choices=('pi05', 'act_small'), default='pi05')
    p.add_argument('--dataset', help='a LeRobot dataset (lamp dataset wrote it); default: the '
                   '2D scene\'s demonstrations')
    p.add_argument('--robot', default=os.path.join('config', 'robots', 'viperx.yaml'),
                   help='pi05 on a dataset: the robot file of its joints')
    p.add_argument('--episodes', type=int, default=200, help='2D scene: demonstration episodes')
    p.add_argument('--keep-idle', type=int, default=22,
                   help='dataset: frames kept of each episode\'s still end (after its last '
                        'change of command)')
    p.add_argument('--steps', type=int, default=1200)
    p.add_argument('--batch-size', type=int, default=32)
    p.add_argument('--lr', type=float, default=1e-3)
    p.add_argument('--max-delay', type=int, default=8, help='pi05: RTC training delays 0..D')
    p.add_argument('--image-size', type=int, default=96, help='act_small: letterbox size')
    p.add_argument('--width', type=int, default=64, help='act_small: transformer width')
    p.add_argument('--layers', type=int, default=2, help='act_small: encoder/decoder layers')
    p.add_argument('--grid', type=int, default=4, help='act_small: tokens per camera side')
    p.add_argument('--keypoints', type=int, default=32,
                   help='act_small: spatial-softmax keypoints per camera (0: none)')
    p.add_argument('--shift', type=int, default=4, help='act_small: random image shift (px)')
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--threads', type=int, default=2, help='torch CPU threads')
    p.add_argument('--out', default=OUT, help='checkpoint folder to write')
    p.add_argument('--tokenizer', default=TOKENIZER, help='pi05: sentencepiece model of prompts')
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    start = time.perf_counter()
    cfg, losses, extra, files = (train_act if args.policy == 'act_small' else train_pi05)(args)
    seconds = time.perf_counter() - start
    what = args.dataset and os.path.basename(os.path.normpath(args.dataset)) or 'the 2D scene'
    weights_sha = write_summary(args.out, cfg, losses, {'policy': args.policy, **extra,
                                                        'files': files + ['loss.png']},
                                seconds, args.threads,
                                f'{args.policy} on {what}: {cfg.steps} steps, seed {args.seed}')
    print(f'wrote {args.out}: {len(files)} checkpoint files, model sha256 {weights_sha[:16]}, '
          f'{seconds:.0f} s in all')
    return 0


if __name__ == '__main__':
    sys.exit(main())
