"""Normalisation of robot state and actions: quantiles (openpi's pi0.5 convention) and, for
imported checkpoints, every mode and epsilon rule their trainers use (`Normalizer`).

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

    def normalizer(self) -> 'Normalizer':
        """openpi's quantile normalisation (range + 1e-6), lamp's own presets' convention."""
        return Normalizer('quantiles', {'q01': self.q01, 'q99': self.q99}, 'openpi')


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
    return stats.normalizer().normalize(_check_last_axis(x, stats))


def quantile_unnormalize(x, stats: QuantileStats) -> np.ndarray:
    """Invert `quantile_normalize`."""
    return stats.normalizer().unnormalize(_check_last_axis(x, stats))


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


def unnormalize_actions(actions, stats, joints: int) -> np.ndarray:
    """(1, horizon, action_dim) normalised model output -> (horizon, joints) in robot units:
    drop the zero-padded dimensions, then undo the normalisation (`stats`: QuantileStats or
    a Normalizer)."""
    actions = np.asarray(actions, dtype=np.float32)
    if actions.ndim != 3 or actions.shape[0] != 1 or actions.shape[2] < joints:
        raise ValueError(f'actions: expected (1, horizon, >= {joints}), got {actions.shape}')
    normalizer = stats.normalizer() if isinstance(stats, QuantileStats) else stats
    return normalizer.unnormalize(actions[0, :, :joints])


def normalize_actions(actions, stats, dim: int) -> np.ndarray:
    """(horizon, joints) in robot units -> (1, horizon, dim) in the model's space, zero-padded:
    `unnormalize_actions` inverted (real-time chunking feeds the model the actions it
    committed)."""
    actions = np.asarray(actions, dtype=np.float32)
    if actions.ndim != 2:
        raise ValueError(f'actions: expected (horizon, joints), got {actions.shape}')
    if not np.isfinite(actions).all():
        raise ValueError('actions: contains non-finite values')
    normalizer = stats.normalizer() if isinstance(stats, QuantileStats) else stats
    return pad_to_dim(normalizer.normalize(actions), dim)[None].astype(np.float32)


# ---- normalisation as a checkpoint's trainer did it ------------------------------------------

MODES = {  # mode -> the stats it reads (low, high) or (centre, scale)
    'quantiles': ('q01', 'q99'),
    'quantile10': ('q10', 'q90'),
    'min_max': ('min', 'max'),
    'mean_std': ('mean', 'std'),
    'identity': (),
}
# How the epsilon enters, per training code base (each written as that code writes it):
#   openpi (and lamp's own presets): range + 1e-6 (quantiles), std + 1e-6 (mean/std), both ways;
#   lerobot: eps (1e-8) only where the range is exactly 0; std + eps to normalise, x * std + mean
#   to unnormalise (NormalizerProcessorStep / UnnormalizerProcessorStep).
CONVENTIONS = {'openpi': 1e-6, 'lerobot': 1e-8}


@dataclass(frozen=True)
class Normalizer:
    """One quantity (state or actions) mapped into the model's space and back, by `mode`
    (MODES) with the epsilon of `convention` (CONVENTIONS): a checkpoint's actions are only
    right in robot units when they are unnormalised exactly as its trainer normalised them."""

    mode: str
    stats: dict          # stat name -> float32 vector (those MODES[mode] names)
    convention: str = 'openpi'

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f'normalisation mode {self.mode!r}; known: {", ".join(MODES)}')
        if self.convention not in CONVENTIONS:
            raise ValueError(f'normalisation convention {self.convention!r}; known: '
                             f'{", ".join(CONVENTIONS)}')
        stats = {}
        for name in MODES[self.mode]:
            if name not in self.stats:
                raise ValueError(f'{self.mode} normalisation needs the stat {name!r}; given: '
                                 f'{sorted(self.stats) or "none"}')
            stats[name] = _vector(self.stats[name], name)
        dims = {v.shape[0] for v in stats.values()}
        if len(dims) > 1:
            raise ValueError(f'{self.mode} stats have different lengths: '
                             f'{ {k: v.shape[0] for k, v in stats.items()} }')
        if self.mode == 'mean_std' and np.any(stats['std'] < 0):
            raise ValueError('mean_std: std has negative values')
        if self.mode not in ('identity', 'mean_std'):
            low, high = (stats[n] for n in MODES[self.mode])
            below = np.flatnonzero(high < low).tolist()
            if below:
                raise ValueError(f'{self.mode}: {MODES[self.mode][1]} is below '
                                 f'{MODES[self.mode][0]} at dimensions {below}')
        object.__setattr__(self, 'stats', stats)

    @property
    def dim(self) -> int | None:
        """Dimensions covered (None for identity: any)."""
        return next((v.shape[0] for v in self.stats.values()), None)

    def typical_range(self, dim: int):
        """(low, high) per dimension where the data mostly lies (example states, checks)."""
        if self.mode == 'identity':
            return -np.ones(dim, np.float32), np.ones(dim, np.float32)
        if self.mode == 'mean_std':
            mean, std = self.stats['mean'], self.stats['std']
            return mean - 2 * std, mean + 2 * std
        return tuple(self.stats[n] for n in MODES[self.mode])

    def _range(self):
        low, high = (self.stats[n] for n in MODES[self.mode])
        span = high - low
        eps = np.float32(CONVENTIONS[self.convention])
        if self.convention == 'lerobot':
            return low, np.where(span == 0, eps, span).astype(np.float32)
        return low, (span + eps).astype(np.float32)

    def _check(self, x) -> np.ndarray:
        x = np.asarray(x, dtype=np.float32)
        if self.dim is not None and (x.ndim == 0 or x.shape[-1] != self.dim):
            raise ValueError(f'x has shape {x.shape}; its last axis must be {self.dim}')
        return x

    def normalize(self, x) -> np.ndarray:
        x = self._check(x)
        if self.mode == 'identity':
            return x.copy()
        if self.mode == 'mean_std':
            eps = np.float32(CONVENTIONS[self.convention])
            return ((x - self.stats['mean']) / (self.stats['std'] + eps)).astype(np.float32)
        low, span = self._range()
        if self.convention == 'lerobot':  # each in its trainer's order of operations
            return (np.float32(2) * (x - low) / span - np.float32(1)).astype(np.float32)
        return ((x - low) / span * np.float32(2) - np.float32(1)).astype(np.float32)

    def unnormalize(self, x) -> np.ndarray:
        x = self._check(x)
        if self.mode == 'identity':
            return x.copy()
        if self.mode == 'mean_std':
            std = self.stats['std']
            if self.convention == 'openpi':
                std = std + np.float32(CONVENTIONS['openpi'])
            return (x * std + self.stats['mean']).astype(np.float32)
        low, span = self._range()
        if self.convention == 'lerobot':
            return ((x + np.float32(1)) * span / np.float32(2) + low).astype(np.float32)
        return ((x + np.float32(1)) / np.float32(2) * span + low).astype(np.float32)

    def to_dict(self) -> dict:
        return {'mode': self.mode, 'convention': self.convention,
                'stats': {k: v.tolist() for k, v in self.stats.items()}}

    @classmethod
    def from_attrs(cls, attrs: dict, where: str) -> 'Normalizer':
        """From a graph node's attrs: {'stats', 'mode', 'convention'}; a graph of lamp's own
        presets stores only the quantile stats (mode quantiles, convention openpi)."""
        try:
            return cls(attrs.get('mode', 'quantiles'), dict(attrs.get('stats') or {}),
                       attrs.get('convention', 'openpi'))
        except ValueError as exc:
            raise ValueError(f'{where}: {exc}') from exc

    def attrs(self) -> dict:
        """The graph attrs that `from_attrs` reads; lamp's own default (quantiles, openpi)
        stores the stats only, as graphs always have."""
        out = {'stats': {k: v.tolist() for k, v in self.stats.items()}}
        if (self.mode, self.convention) != ('quantiles', 'openpi'):
            out.update(mode=self.mode, convention=self.convention)
        return out
