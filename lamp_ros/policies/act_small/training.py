"""Training act_small by behaviour cloning: L1 between the predicted and the demonstrated chunk,
both standardised with the dataset's mean/std (ACT's loss without its VAE term).

Samples come pre-letterboxed to the policy's image size (dataset/samples.py decodes them with
the operator the deployed pipeline runs), so a batch is array indexing, not image decoding.
Each image gets a random shift of up to `shift` pixels (edge-replicated padding, then a crop:
DrQ's augmentation), which keeps a small network from memorising the few hundred demonstrations'
exact pixels.
"""

import numpy as np
import torch
from torch.nn import functional as F

from lamp_ros.ops.standardize import standardize
from lamp_ros.policies.training import optimise, TrainConfig


def random_shift(pixels: torch.Tensor, shift: int, gen: torch.Generator) -> torch.Tensor:
    """(b, cams, S, S, 3) uint8 -> the same, each image moved by up to `shift` pixels."""
    if shift == 0:
        return pixels
    b, cams, size = pixels.shape[:3]
    x = pixels.reshape(b * cams, size, size, 3).permute(0, 3, 1, 2).float()
    x = F.pad(x, (shift,) * 4, mode='replicate')
    dy, dx = torch.randint(0, 2 * shift + 1, (2, b * cams), generator=gen)
    out = torch.stack([x[i, :, dy[i]:dy[i] + size, dx[i]:dx[i] + size]
                       for i in range(b * cams)])
    return out.permute(0, 2, 3, 1).reshape(b, cams, size, size, 3).round().to(torch.uint8)


def batch(policy, samples, indices: np.ndarray) -> tuple:
    """(pixels, mask, state, target) tensors of `indices`, standardised as the policy does."""
    pixels = np.stack([samples.images[slot][indices] for slot in policy.config.cameras], axis=1)
    mask = np.ones(pixels.shape[:2], bool)
    state = standardize(samples.q[indices], policy.state_stats)
    target = standardize(samples.actions[indices], policy.action_stats)
    return (torch.from_numpy(pixels), torch.from_numpy(mask),
            torch.from_numpy(np.asarray(state, np.float32)),
            torch.from_numpy(np.asarray(target, np.float32)))


def train(policy, samples, cfg: TrainConfig, shift: int = 4, progress=None) -> list:
    """Optimise `policy.model` in place on `samples` (whose images are at the policy's size);
    returns the loss of every step."""
    missing = [c for c in policy.config.cameras if c not in samples.slots]
    if missing:
        raise ValueError(f'the dataset has no camera {missing}; it has {list(samples.slots)}')
    if samples.images is None:
        raise ValueError('act_small trains on images decoded up front (chunk_samples '
                         'image_size=the policy\'s)')
    model = policy.model
    rng = np.random.default_rng([cfg.seed, 1])
    gen = torch.Generator().manual_seed(cfg.seed)

    def step_loss(step):
        pixels, mask, state, target = batch(policy, samples,
                                            rng.integers(0, len(samples), cfg.batch_size))
        predicted = model.forward_batch(random_shift(pixels, shift, gen), mask, state)
        return F.l1_loss(predicted, target)
    return optimise(model, cfg, step_loss, progress)
