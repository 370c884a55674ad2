"""What every demo policy's training shares: its settings, its learning-rate schedule and the
optimisation loop (pi05/training.py's flow matching and act_small/training.py's L1 regression
give it their loss)."""

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 3000
    batch_size: int = 32
    lr: float = 3e-4
    warmup_steps: int = 200
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    max_delay: int = 8        # RTC training (flow-matching policies): delays 0..max_delay actions
    seed: int = 0


def learning_rate(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up, then cosine decay to a tenth (LeRobot's pi0.5 schedule, shortened)."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    done = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * min(1.0, done))))


def optimise(model, cfg: TrainConfig, step_loss, progress=None) -> list:
    """Train `model` in place for cfg.steps steps, `step_loss(step)` giving each step's loss
    (AdamW, the schedule above, gradients clipped at cfg.grad_clip); returns every step's loss
    and leaves the model in eval mode."""
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95),
                                  weight_decay=cfg.weight_decay)
    losses = []
    for step in range(cfg.steps):
        for group in optimizer.param_groups:
            group['lr'] = learning_rate(step, cfg)
        loss = step_loss(step)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        losses.append(float(loss.detach()))
        if progress:
            progress(step + 1, cfg.steps, losses[-1])
    model.eval()
    return losses
