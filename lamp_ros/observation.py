"""The observation at the policy boundary, the interface a policy declares, and validation.

An observation is what the robot gives the policy at one instant: a uint8 image per camera
(any size; cameras may be missing), the joint positions and, for a policy that takes one, the
task prompt. Which cameras, joints and whether a prompt is what the policy declares
(`PolicyInterface`); the artifact records it in its ABI, and every tool makes or checks
observations from it. Both the eager policy and the compiled runtime take an observation, so
bad input is refused in one place with a message that names the field, before any number
reaches a model.
"""

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

# The simulated arm's task; the node's `prompt` parameter and the replays default to it.
DEFAULT_PROMPT = 'pick up the red cube and place it in the bowl'
EXAMPLE_FRAME = (480, 640)  # a camera whose policy names no typical size: a VGA frame


@dataclass(frozen=True)
class PolicyInterface:
    """What a policy takes at its boundary: its camera slots (any names, any number, none
    included), the joints of its state and action vectors in order, and whether it reads a
    task prompt. `camera_sizes` ({slot: (height, width)}) is each camera's typical frame, for
    example observations only: any size is accepted at run time. `state_low`/`state_high`
    bound the example states (a plausible range per joint; zeros when not given).
    `action_horizon` is how many actions one `infer` returns."""

    camera_slots: tuple = ()
    joint_names: tuple = ()
    prompt: bool = False
    camera_sizes: dict = field(default_factory=dict)
    state_low: tuple = ()
    state_high: tuple = ()
    action_horizon: int = 0   # actions per chunk the policy returns (the chunker's horizon)

    def __post_init__(self):
        for name in ('camera_slots', 'joint_names', 'state_low', 'state_high'):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if not self.joint_names:
            raise ValueError('interface: a policy drives at least one joint (joint_names)')
        for name, values in (('camera_slots', self.camera_slots),
                             ('joint_names', self.joint_names)):
            if len(set(values)) != len(values):
                raise ValueError(f'interface.{name}: duplicates in {list(values)}')
        unknown = sorted(set(self.camera_sizes) - set(self.camera_slots))
        if unknown:
            raise ValueError(f'interface.camera_sizes: {unknown} are not camera slots '
                             f'{list(self.camera_slots)}')
        for bound in ('state_low', 'state_high'):
            if getattr(self, bound) and len(getattr(self, bound)) != len(self.joint_names):
                raise ValueError(f'interface.{bound}: {len(getattr(self, bound))} values for '
                                 f'{len(self.joint_names)} joints')

    def example_observation(self, seed: int = 0, prompt: str = DEFAULT_PROMPT,
                            sizes: Mapping[str, tuple] | None = None) -> dict:
        """An example observation of this interface (`example_observation`, below)."""
        sizes = sizes if sizes is not None else {
            slot: tuple(self.camera_sizes.get(slot, EXAMPLE_FRAME)) for slot in self.camera_slots}
        joints = len(self.joint_names)
        low = self.state_low or (0.0,) * joints
        high = self.state_high or (0.0,) * joints
        obs = example_observation(sizes, low, high, seed, prompt)
        if not self.prompt:
            del obs['prompt']
        return obs

    def to_dict(self) -> dict:
        return {'camera_slots': list(self.camera_slots), 'joint_names': list(self.joint_names),
                'prompt': self.prompt,
                'camera_sizes': {k: list(v) for k, v in self.camera_sizes.items()}}


@dataclass(frozen=True)
class Observation:
    """images: {camera slot -> (H, W, 3) uint8}; state: (joints,) float; prompt: task text."""

    images: Mapping[str, np.ndarray]
    state: np.ndarray
    prompt: str


def as_observation(obs, prompt: bool = True) -> Observation:
    """Accept an `Observation` or a dict with keys images, state and (when the policy reads
    one: `prompt`) prompt. A policy without cameras may leave images out."""
    if isinstance(obs, Observation):
        return obs
    if not isinstance(obs, Mapping):
        raise ValueError(f'observation: expected a mapping or Observation, got {type(obs)!r}')
    unknown = sorted(set(obs) - {'images', 'state', 'prompt'})
    if unknown:
        raise ValueError(f'observation: unknown keys {unknown}; expected images, state, prompt')
    missing = [k for k in ('state', *(('prompt',) if prompt else ())) if k not in obs]
    if missing:
        raise ValueError(f'observation: missing {missing}')
    return Observation(images=obs.get('images', {}), state=obs['state'],
                       prompt=obs.get('prompt', ''))


def validate_observation(obs, camera_slots, state_dim: int, prompt: bool = True) -> Observation:
    """Return a checked Observation (state as float32) or raise ValueError naming the field.
    `prompt`: whether the policy reads the task prompt (without, a prompt is not required and
    not read)."""
    obs = as_observation(obs, prompt)
    if not isinstance(obs.images, Mapping):
        raise ValueError('images: expected a mapping of camera name -> image')
    if camera_slots and not obs.images:
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
    if prompt and not isinstance(obs.prompt, str):
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
