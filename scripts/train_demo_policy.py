#!/usr/bin/env python3
"""Train the demo policy: a tiny pi0.5 that does the simulator's task, from scripted
demonstrations, on a CPU.

1. Collect disturbed expert episodes of the task (lamp_ros/sim/demonstrations.py; no ROS).
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

    python scripts/train_demo_policy.py            # about 8 minutes on two cores
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

from lamp_ros.ops.normalize import Normalizer  # noqa: E402
from lamp_ros.ops.tokenizer import Tokenizer  # noqa: E402
from lamp_ros.policies.pi05.checkpoint.write import (feature_stats, lerobot_heads,  # noqa: E402
                                                     write_lerobot)
from lamp_ros.policies.pi05.config import get_preset  # noqa: E402
from lamp_ros.policies.pi05.model import Pi05Model  # noqa: E402
from lamp_ros.policies.pi05.policy import GlueConfig, Pi05Policy, RobotIO  # noqa: E402
from lamp_ros.policies.pi05.training import train, TrainConfig  # noqa: E402
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--episodes', type=int, default=200, help='demonstration episodes (10 s)')
    p.add_argument('--steps', type=int, default=1200)
    p.add_argument('--batch-size', type=int, default=32)
    p.add_argument('--lr', type=float, default=1e-3)
    p.add_argument('--max-delay', type=int, default=8, help='RTC training delays 0..D')
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--threads', type=int, default=2, help='torch CPU threads')
    p.add_argument('--out', default=OUT, help='checkpoint folder to write')
    p.add_argument('--tokenizer', default=TOKENIZER, help='sentencepiece model of the prompts')
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    start = time.perf_counter()

    robot = parse_robot({'file': ROBOT}, ROOT, RATE_HZ)
    max_step = [j.max_step for j in robot.joints]
    config = lerobot_heads(replace(get_preset('pi05_tiny'), max_token_len=MAX_TOKENS))

    def collected(done, total):
        if done % 50 == 0 or done == total:
            print(f'demonstrations: {done}/{total} episodes', flush=True)

    limits = ([j.lower for j in robot.joints], [j.upper for j in robot.joints])
    demos = collect(args.episodes, 1000 + args.seed, RATE_HZ, max_step, config.action_horizon,
                    limits, progress=collected)
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
    print(f'training {sum(p.numel() for p in model.parameters()):,} parameters on '
          f'{len(demos):,} samples: {cfg.steps} steps of {cfg.batch_size}', flush=True)
    t_train = time.perf_counter()

    def report(step, total, loss):
        if step % 50 == 0 or step == total:
            rate = step / (time.perf_counter() - t_train)
            print(f'step {step}/{total}  loss {loss:.4f}  {rate:.2f} steps/s  '
                  f'eta {(total - step) / rate:.0f} s', flush=True)

    losses = train(policy, batches(demos, cfg.batch_size, args.seed), cfg, progress=report)
    seconds = time.perf_counter() - start

    files = write_lerobot(args.out, model, stats, TOKENIZER_NAME)
    beside = os.path.join(args.out, 'tokenizer.model')
    if os.path.abspath(args.tokenizer) != os.path.abspath(beside):  # the checkpoint names it
        shutil.copyfile(args.tokenizer, beside)
    norm_stats = {'norm_stats': {
        key: {s: stats[feature][s].tolist() for s in ('mean', 'std', 'q01', 'q99')}
        for key, feature in (('state', 'observation.state'), ('actions', 'action'))}}
    with open(os.path.join(args.out, 'norm_stats.json'), 'w', encoding='utf-8') as f:
        json.dump(norm_stats, f, indent=1)
    with open(os.path.join(args.out, 'model.safetensors'), 'rb') as f:
        weights_sha = hashlib.sha256(f.read()).hexdigest()
    loss_plot(losses, os.path.join(args.out, 'loss.png'),
              f'demo policy: {cfg.steps} steps, seed {args.seed}')
    summary = {'train': asdict(cfg), 'episodes': args.episodes, 'samples': len(demos),
               'tokenizer_sha256': policy.tokenizer.sha256,
               'threads': args.threads, 'seconds': round(seconds, 1),
               'final_loss': float(np.mean(losses[-50:])), 'model_sha256': weights_sha,
               'torch': torch.__version__, 'files': files + ['norm_stats.json', 'loss.png'],
               'losses_every_10': [round(x, 5) for x in losses[::10]]}
    with open(os.path.join(args.out, 'training.json'), 'w', encoding='utf-8') as f:
        json.dump(summary, f, indent=1)
    print(f'wrote {args.out}: {len(files)} checkpoint files, model sha256 {weights_sha[:16]}, '
          f'{seconds:.0f} s in all')
    return 0


if __name__ == '__main__':
    sys.exit(main())
