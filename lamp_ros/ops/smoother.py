"""Low-pass filter the per-tick command to take the edge off chunk hand-overs.

Chunk merging removes most jumps between chunks, but the policy's own jitter and the step left
by a late chunk still reach the motors. An EMA is the simplest cure and adds a fixed lag; the
one-euro filter (Casiez, Roussel and Vogel, CHI 2012) lowers its cutoff when the arm is slow,
where jitter shows, and raises it with speed, where lag hurts.

One-euro follows the reference implementation: the derivative is taken from the previous raw
sample. State (see `init_state`): `y` (J,) last output, `x_prev` (J,) last raw sample,
`dx_hat` (J,) filtered derivative, `t_prev` (1,), `has_prev` (1,) bool.
"""

from dataclasses import asdict, dataclass, fields
import math

import numpy as np

from lamp_ros.ops.state import (
    check_finite_float, check_keys, check_positive_int, check_state, copy_state, finite_vector)

MODES = ('none', 'ema', 'one_euro')
WHERE = 'smoother'


def _alpha(cutoff, te: float):
    """Smoothing factor of a first-order low-pass at `cutoff` Hz for a sample period `te`."""
    r = 2.0 * math.pi * cutoff * te
    return r / (r + 1.0)


@dataclass(frozen=True)
class Smoother:
    """Parameters of the command filter; all state lives in the dict from `init_state`."""

    mode: str  # 'none', 'ema' or 'one_euro'
    joints: int
    alpha: float = 0.5  # EMA weight of the new sample; 1 passes samples through
    min_cutoff: float = 1.0  # one-euro cutoff at rest, Hz
    beta: float = 0.0  # one-euro cutoff increase per unit of speed
    d_cutoff: float = 1.0  # one-euro cutoff of the derivative filter, Hz

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f'{WHERE}: mode {self.mode!r} is unknown; known: {MODES}')
        check_positive_int(self.joints, 'joints', WHERE)
        object.__setattr__(self, 'joints', int(self.joints))
        for name in ('alpha', 'min_cutoff', 'beta', 'd_cutoff'):
            object.__setattr__(self, name, check_finite_float(getattr(self, name), name, WHERE))
        if not 0.0 < self.alpha <= 1.0:
            raise ValueError(f'{WHERE}: alpha must be in (0, 1], got {self.alpha}')
        for name in ('min_cutoff', 'd_cutoff'):
            if getattr(self, name) <= 0:
                raise ValueError(f'{WHERE}: {name} must be > 0 Hz, got {getattr(self, name)}')
        if self.beta < 0:
            raise ValueError(f'{WHERE}: beta must be >= 0, got {self.beta}')

    def to_dict(self) -> dict:
        """Return JSON-ready parameters that `from_dict` reads back."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d) -> 'Smoother':
        """Build from a dict of parameters; unknown or missing keys are named in the error."""
        check_keys(d, [f.name for f in fields(cls)], WHERE, required=('mode', 'joints'))
        return cls(**d)

    def init_state(self) -> dict:
        """Return the empty state: the next sample passes through unfiltered."""
        return {
            'y': np.zeros(self.joints, dtype=np.float64),
            'x_prev': np.zeros(self.joints, dtype=np.float64),
            'dx_hat': np.zeros(self.joints, dtype=np.float64),
            't_prev': np.zeros(1, dtype=np.float64),
            'has_prev': np.zeros(1, dtype=bool),
        }

    def step(self, state: dict, x, t: float):
        """Filter sample x (J,) taken at time t (s); return (y (J,), new_state).

        In 'one_euro' mode a sample not later than the previous one (te <= 0) returns the
        previous output and leaves the state as it was, since the rates would divide by zero.
        'ema' filters per sample and ignores t.
        """
        check_state(state, self.init_state(), WHERE)
        x = finite_vector(x, self.joints, 'x', WHERE)
        t = check_finite_float(t, 't', WHERE)
        new = copy_state(state)
        if not state['has_prev'][0] or self.mode == 'none':
            y = x
            new['dx_hat'][:] = 0.0
        else:
            te = t - float(state['t_prev'][0])
            if self.mode == 'one_euro' and te <= 0:
                return state['y'].copy(), new
            if self.mode == 'ema':
                y = self.alpha * x + (1.0 - self.alpha) * state['y']
            else:
                y, new['dx_hat'] = self._one_euro(state, x, te)
        new['y'][:] = y
        new['x_prev'][:] = x
        new['t_prev'][0] = t
        new['has_prev'][0] = True
        return y.copy(), new

    def _one_euro(self, state: dict, x: np.ndarray, te: float):
        a_d = _alpha(self.d_cutoff, te)
        dx = (x - state['x_prev']) / te
        dx_hat = a_d * dx + (1.0 - a_d) * state['dx_hat']
        cutoff = self.min_cutoff + self.beta * np.abs(dx_hat)
        a = _alpha(cutoff, te)
        return a * x + (1.0 - a) * state['y'], dx_hat
