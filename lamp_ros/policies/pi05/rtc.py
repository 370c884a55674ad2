"""Real-time chunking, trained mode: a chunk generated around the actions already committed.

While a chunk is computed, the robot goes on executing the previous one: the first d actions of
the new chunk (d = the inference delay in control periods) are already decided. A policy
trained with random delays (training.py: the first d actions given clean at flow time 0, the
loss on the rest) generates the rest around them by inpainting alone: at every Euler step the
committed actions are put back, clean, at flow time 0, and only the others integrate from noise
(t = 1) to actions (t = 0). No backward pass, so every backend can run it.

This is the eager reference of the mode (issue 53 compiles it into the artifact): `inpaint`
runs the expert's Euler loop with a per-action flow time.
"""

import torch


def inpaint(expert, k_cache, v_cache, prefix_mask, noise, committed, delay: int):
    """(b, horizon, action_dim) normalised actions whose first `delay` rows are `committed`
    (b, >= delay, action_dim, the model's normalised space) and whose rest the expert generates
    from `noise` conditioned on them."""
    horizon = noise.shape[1]
    if not 0 <= delay <= horizon:
        raise ValueError(f'delay {delay}: must be within 0..{horizon} actions')
    if committed.shape[1] < delay:
        raise ValueError(f'committed has {committed.shape[1]} actions, the delay needs {delay}')
    dtype = expert.action_in_proj.weight.dtype
    fixed = torch.arange(horizon, device=noise.device)[None, :] < delay       # (1, horizon)
    prefix = torch.zeros_like(noise, dtype=dtype)
    prefix[:, :delay] = committed[:, :delay].to(dtype)
    steps = expert.cfg.num_steps
    dt = -1.0 / steps
    x_t = torch.where(fixed[..., None], prefix, noise.to(dtype))
    for step in range(steps):
        t = torch.where(fixed, 0.0, 1.0 + step * dt).expand(noise.shape[0], horizon)
        x_t = x_t + dt * expert.velocity(x_t, t, k_cache, v_cache, prefix_mask)
        x_t = torch.where(fixed[..., None], prefix, x_t)
    return x_t.float()
