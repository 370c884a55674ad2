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
predicted clean actions at every Euler step (`GuidedExpert`, which also keeps that computation,
backward pass included, as a graph an export can follow).
"""

import math

import torch
from torch import nn


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

SCHEDULES = ('linear', 'exp', 'ones', 'zeros')


def prefix_weights(delay, end, horizon: int, schedule: str) -> torch.Tensor:
    """(horizon,) how strongly each action is pulled toward the previous chunk: 1 before the
    delay, decaying from there to `end` (where the previous chunk's overlap ends) by
    `schedule` (linear, exp: the paper's; ones: 1 up to end; zeros: 1 up to the delay only),
    0 after. `delay` and `end`: integers or integer tensors (torch ops only, so an exported
    graph takes them as inputs)."""
    if schedule not in SCHEDULES:
        raise ValueError(f'prefix_schedule {schedule!r}: one of {", ".join(SCHEDULES)}')
    end = torch.clamp(torch.as_tensor(end).reshape(()), 0, horizon)
    delay = torch.minimum(torch.clamp(torch.as_tensor(delay).reshape(()).to(end.device),
                                      min=0), end)
    index = torch.arange(horizon, device=end.device)
    if schedule == 'zeros':
        return (index < delay).float()
    if schedule == 'ones':
        return (index < end).float()
    ramp = 1.0 - (index - delay + 1).float() / (end - delay + 1).float()
    if schedule == 'exp':
        ramp = ramp * torch.expm1(ramp) / (math.e - 1.0)
    return torch.where(index < delay, 1.0, torch.where(index < end, ramp, 0.0))


def guidance_weight(t: float, max_weight: float) -> float:
    """The paper's min(beta, (1 - tau) / (tau r_tau^2)) in this flow's time (t = 1 - tau: 1 is
    noise, 0 the actions): ((1 - t)^2 + t^2) / (t (1 - t)), clipped."""
    if t <= 0.0 or t >= 1.0:
        return max_weight
    return min(max_weight, ((1.0 - t) ** 2 + t ** 2) / (t * (1.0 - t)))


class GuidedExpert(nn.Module):
    """The denoise stage with guidance: (k, v, prefix mask, noise, previous, delay, end) ->
    actions. `previous` (b, horizon, action_dim, normalised) is the previous chunk's actions
    for the same times; at every Euler step the clean actions the model predicts, x - t v, are
    compared with it under `prefix_weights`, and the gradient of that error through the model
    (a vector-Jacobian product, torch.func.vjp) bends the velocity. No retraining.

    torch.export cannot follow a gradient taken inside a forward, so the stage is also kept as
    the ATen graph of the whole computation, backward included (make_fx over the functional
    form, its weights as inputs), traced on the first call for each input signature; every
    later call, an export's included, runs that graph with the module's own weights, which
    keep their names. Its shapes are fixed: an export with a dynamic dimension (the cuda
    backend's prompt lengths, fusion.text_lengths) is refused with the reason."""

    def __init__(self, expert, schedule: str = 'linear', max_weight: float = 10.0):
        super().__init__()
        if schedule not in SCHEDULES:
            raise ValueError(f'prefix_schedule {schedule!r}: one of {", ".join(SCHEDULES)}')
        self.expert = expert
        self.cfg = expert.cfg
        self.schedule = schedule
        self.max_weight = float(max_weight)
        self._graphs = {}

    def guide(self, velocity_of, k_cache, v_cache, prefix_mask, noise, previous, delay, end):
        """The computation itself, eager; `velocity_of` is the expert's `velocity` (or it on
        weights given as inputs, when traced)."""
        steps = self.cfg.num_steps
        dt = -1.0 / steps
        dtype = noise.dtype
        weights = prefix_weights(delay, end, noise.shape[1], self.schedule).to(dtype)
        weights = weights[None, :, None]
        x_t = noise
        for step in range(steps):
            t = 1.0 + step * dt
            times = torch.full((x_t.shape[0],), t, device=x_t.device)

            def clean(x):
                velocity = velocity_of(x, times, k_cache, v_cache, prefix_mask)
                return x - t * velocity, velocity

            predicted, pull_back, velocity = torch.func.vjp(clean, x_t, has_aux=True)
            (pull,) = pull_back((previous - predicted) * weights)
            x_t = x_t + dt * (velocity - guidance_weight(t, self.max_weight) * pull)
        return x_t

    def forward(self, k_cache, v_cache, prefix_mask, noise, previous, delay, end):
        dtype = self.expert.action_in_proj.weight.dtype
        args = (k_cache, v_cache, prefix_mask, noise.to(dtype), previous.to(dtype),
                delay, end)
        if any(isinstance(size, torch.SymInt) for a in args for size in a.shape):
            raise ValueError(
                'rtc mode guided: the denoise stage\'s gradient graph is traced for fixed '
                'shapes, and this export asks for a prompt-length-dependent one; leave '
                'fusion.text_lengths empty ([]) for rtc mode guided')
        key = tuple((tuple(a.shape), a.dtype, a.device.type) for a in args)
        graph = self._graphs.get(key)
        if graph is None:
            graph = self._graphs[key] = self._trace(args)
        weights = dict(self.expert.named_parameters())
        buffers = dict(self.expert.named_buffers())
        return graph(weights, buffers, *args).float()

    def _trace(self, args):
        from torch.fx.experimental.proxy_tensor import make_fx

        def functional(weights, buffers, *inputs):  # the expert's code on the weights given
            return self.guide(_Bound(self.expert, weights, buffers).velocity, *inputs)

        example = [a.detach().clone() if a.is_inference() else a for a in args]
        weights = {k: v.detach() for k, v in self.expert.named_parameters()}
        buffers = dict(self.expert.named_buffers())
        with torch.inference_mode(False), torch.enable_grad():
            return make_fx(functional, tracing_mode='real')(weights, buffers, *example)


class _Velocity(nn.Module):
    """An expert's `velocity` as a module's forward, for torch.func.functional_call."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, *args):
        return self.inner.velocity(*args)


class _Bound:
    """The expert with given weights and buffers, as `guide` calls it."""

    def __init__(self, module, weights, buffers):
        self.module = _Velocity(module)
        self.state = {f'inner.{k}': v for k, v in {**weights, **buffers}.items()}

    def velocity(self, *args):
        return torch.func.functional_call(self.module, self.state, args)


def guided(expert, k_cache, v_cache, prefix_mask, noise, previous, delay: int, end: int,
           schedule: str = 'linear', max_weight: float = 10.0):
    """Guided actions (GuidedExpert) for plain-integer delay and end, eager."""
    module = GuidedExpert(expert, schedule, max_weight)
    inputs = [x.clone() if x.is_inference() else x for x in (k_cache, v_cache, prefix_mask)]
    with torch.inference_mode(False):
        return module.guide(expert.velocity, *inputs,
                            noise.to(expert.action_in_proj.weight.dtype),
                            previous.to(expert.action_in_proj.weight.dtype),
                            torch.tensor(delay), torch.tensor(end)).float()
