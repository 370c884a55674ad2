"""Mean / standard-deviation normalisation (ACT's and LeRobot's MEAN_STD convention).

x -> (x - mean) / std on the way in, x * std + mean on the way out, one mean and std per
dimension. A std of zero (a joint that never moved in the data) would divide by zero: it is
floored at `EPS`, so such a dimension passes through shifted but not scaled to infinity.
"""

from dataclasses import dataclass

import numpy as np

from lamp_ros.ops.normalize import _vector

EPS = 1e-8


@dataclass(frozen=True)
class MeanStdStats:
    """The mean and the standard deviation of one quantity, one value per dimension."""

    mean: np.ndarray
    std: np.ndarray

    def __post_init__(self):
        mean, std = _vector(self.mean, 'mean'), _vector(self.std, 'std')
        if mean.shape != std.shape:
            raise ValueError(f'std has shape {std.shape} but mean has shape {mean.shape}')
        if (std < 0).any():
            raise ValueError(f'std is negative at dimensions {np.flatnonzero(std < 0).tolist()}')
        for arr in (mean, std):
            arr.flags.writeable = False
        object.__setattr__(self, 'mean', mean)
        object.__setattr__(self, 'std', std)

    @classmethod
    def from_dict(cls, d, name: str) -> 'MeanStdStats':
        """Build from `{"mean": [...], "std": [...]}`; errors name `name.<key>`."""
        if not isinstance(d, dict) or not {'mean', 'std'} <= set(d):
            raise ValueError(f'{name} must be an object with mean and std')
        return cls(mean=_vector(d['mean'], f'{name}.mean'), std=_vector(d['std'], f'{name}.std'))

    def to_dict(self) -> dict:
        return {'mean': self.mean.tolist(), 'std': self.std.tolist()}


def _checked(x, stats: MeanStdStats) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    if x.shape[-1] != stats.mean.shape[0]:
        raise ValueError(f'standardize: last axis has {x.shape[-1]} values, the stats '
                         f'{stats.mean.shape[0]}')
    return x


def standardize(x, stats: MeanStdStats) -> np.ndarray:
    x = _checked(x, stats)
    return ((x - stats.mean) / np.maximum(stats.std, EPS)).astype(np.float32)


def unstandardize(x, stats: MeanStdStats) -> np.ndarray:
    x = _checked(x, stats)
    return (x * np.maximum(stats.std, EPS) + stats.mean).astype(np.float32)
