"""Quantile normalisation of robot state and actions (openpi's pi0.5 convention).

The policy sees state and emits actions in [-1, 1] relative to the 1st and 99th percentiles
of the training data; the statistics travel with the policy as JSON and are checked on load
so that a stats file for another robot fails loudly rather than moving the arm wrongly.
"""

from dataclasses import dataclass
import json

import numpy as np

EPS = 1e-6


def _vector(value, name: str) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError) as e:
        raise ValueError(f'{name} must be a list of numbers: {e}') from e
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f'{name} must be a non-empty 1-D list, got shape {arr.shape}')
    if not np.all(np.isfinite(arr)):
        raise ValueError(f'{name} has non-finite values')
    return arr


@dataclass(frozen=True)
class QuantileStats:
    """The 1st and 99th percentiles of one quantity, one value per dimension."""

    q01: np.ndarray
    q99: np.ndarray

    def __post_init__(self):
        q01 = _vector(self.q01, 'q01')
        q99 = _vector(self.q99, 'q99')
        if q01.shape != q99.shape:
            raise ValueError(f'q99 has shape {q99.shape} but q01 has shape {q01.shape}')
        below = np.flatnonzero(q99 < q01).tolist()
        if below:
            raise ValueError(f'q99 is below q01 at dimensions {below}')
        q01.flags.writeable = False
        q99.flags.writeable = False
        object.__setattr__(self, 'q01', q01)
        object.__setattr__(self, 'q99', q99)

    @property
    def dim(self) -> int:
        """Number of dimensions covered."""
        return int(self.q01.shape[0])

    @classmethod
    def from_dict(cls, d, name: str) -> 'QuantileStats':
        """Build from `{"q01": [...], "q99": [...]}`; errors name `name.<key>`."""
        if not isinstance(d, dict):
            raise ValueError(f'{name} must be an object with q01 and q99')
        for key in ('q01', 'q99'):
            if key not in d:
                raise ValueError(f'{name}.{key} is missing')
        try:
            return cls(q01=_vector(d['q01'], f'{name}.q01'), q99=_vector(d['q99'], f'{name}.q99'))
        except ValueError as e:
            message = str(e)
            if message.startswith(name):
                raise
            # __post_init__ messages start with the key ('q01 ...', 'q99 ...').
            raise ValueError(f'{name}.{message}') from e

    def to_dict(self) -> dict:
        """Return JSON-ready lists."""
        return {'q01': self.q01.tolist(), 'q99': self.q99.tolist()}


@dataclass(frozen=True)
class NormStats:
    """Per-joint quantile statistics for the state input and the action output."""

    joint_names: tuple[str, ...]
    state: QuantileStats
    actions: QuantileStats

    def __post_init__(self):
        names = tuple(self.joint_names)
        if not names or not all(isinstance(n, str) and n for n in names):
            raise ValueError('norm_stats.joint_names must be a non-empty list of names')
        if len(set(names)) != len(names):
            raise ValueError(f'norm_stats.joint_names has duplicates: {list(names)}')
        object.__setattr__(self, 'joint_names', names)
        for key in ('state', 'actions'):
            stats = getattr(self, key)
            if stats.dim != len(names):
                raise ValueError(
                    f'norm_stats.{key}.q01 has {stats.dim} values but '
                    f'norm_stats.joint_names has {len(names)}')

    @classmethod
    def from_dict(cls, d) -> 'NormStats':
        """Build from the JSON layout; errors name the offending key."""
        if not isinstance(d, dict):
            raise ValueError('norm_stats must be a JSON object')
        for key in ('joint_names', 'state', 'actions'):
            if key not in d:
                raise ValueError(f'norm_stats.{key} is missing')
        names = d['joint_names']
        if not isinstance(names, list):
            raise ValueError('norm_stats.joint_names must be a list of names')
        return cls(
            joint_names=tuple(names),
            state=QuantileStats.from_dict(d['state'], 'norm_stats.state'),
            actions=QuantileStats.from_dict(d['actions'], 'norm_stats.actions'),
        )

    @classmethod
    def load(cls, path: str) -> 'NormStats':
        """Read stats from a JSON file."""
        try:
            with open(path, encoding='utf-8') as f:
                d = json.load(f)
        except OSError as e:
            raise ValueError(f'norm stats {path!r} cannot be read: {e}') from e
        except json.JSONDecodeError as e:
            raise ValueError(f'norm stats {path!r} is not valid JSON: {e}') from e
        return cls.from_dict(d)

    def to_dict(self) -> dict:
        """Return the JSON layout that `from_dict` reads."""
        return {
            'joint_names': list(self.joint_names),
            'state': self.state.to_dict(),
            'actions': self.actions.to_dict(),
        }


def _check_last_axis(x: np.ndarray, stats: QuantileStats) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    if x.ndim == 0 or x.shape[-1] != stats.dim:
        raise ValueError(f'x has shape {x.shape}; its last axis must be {stats.dim}')
    return x


def quantile_normalize(x, stats: QuantileStats) -> np.ndarray:
    """Map x so that q01 -> -1 and q99 -> 1 (values outside are not clipped)."""
    x = _check_last_axis(x, stats)
    out = (x - stats.q01) / (stats.q99 - stats.q01 + np.float32(EPS)) * 2 - 1
    return out.astype(np.float32)


def quantile_unnormalize(x, stats: QuantileStats) -> np.ndarray:
    """Invert `quantile_normalize`."""
    x = _check_last_axis(x, stats)
    out = (x + 1) / 2 * (stats.q99 - stats.q01 + np.float32(EPS)) + stats.q01
    return out.astype(np.float32)


def pad_to_dim(x: np.ndarray, dim: int) -> np.ndarray:
    """Zero-pad the last axis of x up to `dim` (the model's fixed action/state width)."""
    x = np.asarray(x)
    if x.ndim == 0:
        raise ValueError('x must have at least one axis')
    if x.shape[-1] > dim:
        raise ValueError(f'x has last axis {x.shape[-1]}, larger than dim={dim}')
    if x.shape[-1] == dim:
        return x.copy()
    pad = [(0, 0)] * (x.ndim - 1) + [(0, dim - x.shape[-1])]
    return np.pad(x, pad)


def unnormalize_actions(actions, stats: QuantileStats, joints: int) -> np.ndarray:
    """(1, horizon, action_dim) normalised model output -> (horizon, joints) in robot units:
    drop the zero-padded dimensions, then undo the quantile normalisation."""
    actions = np.asarray(actions, dtype=np.float32)
    if actions.ndim != 3 or actions.shape[0] != 1 or actions.shape[2] < joints:
        raise ValueError(f'actions: expected (1, horizon, >= {joints}), got {actions.shape}')
    return quantile_unnormalize(actions[0, :, :joints], stats)
