"""Real-time chunking: a chunk generated around the actions already committed.

While a chunk is computed, the robot goes on executing the previous one: the first d actions of
the new chunk (d = the inference delay in control periods) are already decided. A policy
trained with random delays (training.py: the first d actions given clean at flow time 0, the
loss on the rest) generates the rest around them by inpainting alone: at every Euler step the
committed actions are put back, clean, at flow time 0, and only the others integrate from noise
(t = 1) to actions (t = 0). No backward pass, so every backend can run it.

The delay is a tensor, not a Python int, so one exported graph serves every delay: the
committed rows are picked by `arange(horizon) < delay` and `torch.where`. Both forms of the
expert (model.ActionExpert, staged.stages.ExpertStage) run their Euler loop through these
helpers; `inpaint` is the eager form's entry.

Guided mode (`guided`, the RTC paper's prefix guidance) serves a model never trained with
delays: the previous chunk's actions for the same times pull the new chunk, fully before the
delay and less and less after it (`prefix_weights`), through the gradient of the model's
predicted clean actions at every Euler step. The eager pipeline runs it; no backend compiles a
backward pass yet.
"""

import math

import torch


def committed_mask(delay: torch.Tensor, horizon: int, device) -> torch.Tensor:
    """(1, horizon) bool: True for the first `delay` actions (delay a 0-d or (1,) integer
    tensor)."""
    return torch.arange(horizon, device=device)[None, :] < delay.reshape(1, 1).to(device)


def start(noise: torch.Tensor, committed: torch.Tensor, fixed: torch.Tensor) -> torch.Tensor:
    """x at t = 1: the committed actions where fixed, the noise elsewhere."""
    return torch.where(fixed[..., None], committed.to(noise.dtype), noise)


def flow_times(fixed: torch.Tensor, t: float, batch: int) -> torch.Tensor:
    """(batch, horizon) flow time of each action: 0 (clean) where fixed, t elsewhere."""
    return torch.where(fixed, 0.0, t).expand(batch, fixed.shape[1])


def put_back(x_t: torch.Tensor, committed: torch.Tensor, fixed: torch.Tensor) -> torch.Tensor:
    """After an Euler step: the committed actions restored exactly."""
    return torch.where(fixed[..., None], committed.to(x_t.dtype), x_t)


def check_inputs(noise: torch.Tensor, committed: torch.Tensor, delay: int) -> None:
    """Plain-Python checks of an eager call (the exported graphs take any delay tensor)."""
    horizon = noise.shape[1]
    if not 0 <= delay <= horizon:
        raise ValueError(f'delay {delay}: must be within 0..{horizon} actions')
    if committed.shape[1] < delay:
        raise ValueError(f'committed has {committed.shape[1]} actions, the delay needs {delay}')


def inpaint(expert, k_cache, v_cache, prefix_mask, noise, committed, delay: int):
    """(b, horizon, action_dim) normalised actions whose first `delay` rows are `committed`
    (b, >= delay, action_dim, the model's normalised space) and whose rest the expert generates
    from `noise` conditioned on them."""
    check_inputs(noise, committed, delay)
    padded = torch.zeros_like(noise)
    padded[:, :delay] = committed[:, :delay]
    return expert(k_cache, v_cache, prefix_mask, noise, padded,
                  torch.tensor([delay], device=noise.device))


# ---- guided mode: the RTC paper's guidance, for models not trained with delays -----------------

def prefix_weights(delay: int, end: int, horizon: int, schedule: str) -> torch.Tensor:
    """(horizon,) how strongly each action is pulled toward the previous chunk: 1 before the
    delay, decaying from there to `end` (where the previous chunk's overlap ends) by
    `schedule` (linear, exp: the paper's; ones: 1 up to end; zeros: 1 up to the delay only),
    0 after."""
    end = max(min(end, horizon), 0)
    delay = max(min(delay, end), 0)
    weights = torch.zeros(horizon)
    weights[:delay] = 1.0
    if schedule == 'ones':
        weights[:end] = 1.0
    elif schedule in ('linear', 'exp') and end > delay:
        ramp = torch.linspace(1.0, 0.0, end - delay + 2)[1:-1]
        if schedule == 'exp':
            ramp = ramp * torch.expm1(ramp) / (math.e - 1.0)
        weights[delay:end] = ramp
    elif schedule not in ('linear', 'exp', 'zeros'):
        raise ValueError(f'prefix_schedule {schedule!r}: one of linear, exp, ones, zeros')
    return weights


def guidance_weight(t: float, max_weight: float) -> float:
    """The paper's min(beta, (1 - tau) / (tau r_tau^2)) in this flow's time (t = 1 - tau: 1 is
    noise, 0 the actions): ((1 - t)^2 + t^2) / (t (1 - t)), clipped."""
    if t <= 0.0 or t >= 1.0:
        return max_weight
    return min(max_weight, ((1.0 - t) ** 2 + t ** 2) / (t * (1.0 - t)))


def guided(expert, k_cache, v_cache, prefix_mask, noise, previous, delay: int, end: int,
           schedule: str = 'linear', max_weight: float = 10.0):
    """(b, horizon, action_dim) actions pulled toward `previous` (b, horizon, action_dim, the
    previous chunk's actions for the same times, normalised) by guidance: at every Euler step
    the clean actions the model predicts, x - t v, are compared with `previous` under
    `prefix_weights`, and the gradient of that error through the model (a vector-Jacobian
    product) bends the velocity. No retraining; one backward pass per step."""
    steps = expert.cfg.num_steps
    dt = -1.0 / steps
    dtype = expert.action_in_proj.weight.dtype
    horizon = noise.shape[1]
    weights = prefix_weights(delay, end, horizon, schedule).to(noise.device, dtype)[None, :, None]
    previous = previous.to(dtype)
    k_cache, v_cache, prefix_mask = (x.clone() for x in (k_cache, v_cache, prefix_mask))
    x_t = noise.to(dtype)
    for step in range(steps):
        t = 1.0 + step * dt
        with torch.enable_grad():
            x = x_t.detach().requires_grad_(True)
            velocity = expert.velocity(x, torch.full((x.shape[0],), t, device=x.device),
                                       k_cache, v_cache, prefix_mask)
            clean = x - t * velocity
            (pull,) = torch.autograd.grad(clean, x, (previous - clean) * weights)
        x_t = x_t + dt * (velocity.detach() - guidance_weight(t, max_weight) * pull)
    return x_t.float()
