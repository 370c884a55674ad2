"""What every demo policy's training shares: its settings and its learning-rate schedule
(pi05/training.py's flow matching and act_small/training.py's L1 regression both use them)."""

from dataclasses import dataclass

import numpy as np


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
