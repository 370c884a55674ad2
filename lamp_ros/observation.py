"""The observation at the policy boundary, and its validation.

An observation is what the robot gives the policy at one instant: a uint8 image per camera
(any size; cameras may be missing), the joint positions and the task prompt. Both the eager
policy and the compiled runtime take it, so bad input is refused in one place with a message
that names the field, before any number reaches a model.
"""

from dataclasses import dataclass
from typing import Mapping

import numpy as np

# The simulated arm's task; the node's `prompt` parameter and the replays default to it.
DEFAULT_PROMPT = 'pick up the red cube and place it in the bowl'


@dataclass(frozen=True)
class Observation:
    """images: {camera slot -> (H, W, 3) uint8}; state: (joints,) float; prompt: task text."""

    images: Mapping[str, np.ndarray]
    state: np.ndarray
    prompt: str


def as_observation(obs) -> Observation:
    """Accept an `Observation` or a dict with keys images, state, prompt."""
    if isinstance(obs, Observation):
        return obs
    if not isinstance(obs, Mapping):
        raise ValueError(f'observation: expected a mapping or Observation, got {type(obs)!r}')
    unknown = sorted(set(obs) - {'images', 'state', 'prompt'})
    if unknown:
        raise ValueError(f'observation: unknown keys {unknown}; expected images, state, prompt')
    missing = [k for k in ('images', 'state', 'prompt') if k not in obs]
    if missing:
        raise ValueError(f'observation: missing {missing}')
    return Observation(images=obs['images'], state=obs['state'], prompt=obs['prompt'])


def validate_observation(obs, camera_slots, state_dim: int) -> Observation:
    """Return a checked Observation (state as float32) or raise ValueError naming the field."""
    obs = as_observation(obs)
    if not isinstance(obs.images, Mapping):
        raise ValueError('images: expected a mapping of camera name -> image')
    if not obs.images:
        raise ValueError(f'images: no camera image given; slots are {", ".join(camera_slots)}')
    for name, image in obs.images.items():
        field = f'images[{name!r}]'
        if name not in camera_slots:
            raise ValueError(f'{field}: unknown camera; known: {", ".join(camera_slots)}')
        if not isinstance(image, np.ndarray):
            raise ValueError(f'{field}: expected a numpy array, got {type(image).__name__}')
        if image.dtype != np.uint8:
            raise ValueError(f'{field}: expected dtype uint8, got {image.dtype}')
        if image.ndim != 3 or image.shape[2] != 3 or min(image.shape[:2]) < 1:
            raise ValueError(f'{field}: expected shape (H, W, 3), got {image.shape}')
    try:
        state = np.asarray(obs.state, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise ValueError(f'state: not numeric ({exc})') from exc
    if state.shape != (state_dim,):
        raise ValueError(f'state: expected shape ({state_dim},), got {state.shape}')
    bad = np.flatnonzero(~np.isfinite(state))
    if bad.size:
        raise ValueError(f'state: non-finite value at index {int(bad[0])} ({state[bad[0]]})')
    if not isinstance(obs.prompt, str):
        raise ValueError(f'prompt: expected str, got {type(obs.prompt).__name__}')
    return Observation(images=dict(obs.images), state=state, prompt=obs.prompt)


def example_observation(sizes: Mapping[str, tuple], state_low, state_high, seed: int = 0,
                        prompt: str = DEFAULT_PROMPT) -> dict:
    """Deterministic inputs of the right shapes for tracing, parity runs, demos and tests:
    one random-but-smooth image (gradients plus noise) per camera at its (height, width), a
    state drawn inside [state_low, state_high] (10-90% of the range), the prompt."""
    rng = np.random.default_rng(seed)
    images = {}
    for slot, (h, w) in sizes.items():
        yy, xx = np.mgrid[0:h, 0:w]
        base = np.stack([xx * 255 // max(w - 1, 1), yy * 255 // max(h - 1, 1),
                         (xx + yy) * 255 // max(h + w - 2, 1)], axis=-1)
        noise = rng.integers(-40, 41, size=(h, w, 3))
        images[slot] = np.clip(base + noise, 0, 255).astype(np.uint8)
    lo, hi = np.asarray(state_low, np.float32), np.asarray(state_high, np.float32)
    state = (lo + (hi - lo) * rng.uniform(0.1, 0.9, size=lo.shape)).astype(np.float32)
    return {'images': images, 'state': state, 'prompt': prompt}
