"""Last gate before the motors: limit each command's step and keep it inside joint limits.

Whatever the policy, the merge and the filter produce, the arm must never get a NaN, a target
outside its joint range, or a jump larger than it can follow in one tick. The step limit runs
first, relative to the previous command (or, on the first tick, to the measured joint
positions), and the joint limits last, so the limits hold even when the step limit would
allow crossing them. A non-finite input raises instead of being clipped: the caller then
holds the last command, which is safe, while any value made up here would not be.

State (see `init_state`): `prev` (J,) float64 last command, `has_prev` (1,) bool.
"""

from dataclasses import dataclass, fields
import numbers

import numpy as np

from lamp_ros.ops.state import check_keys, check_state, copy_state, finite_vector

WHERE = 'clamp'


def _limits(values, size, name: str) -> tuple:
    if isinstance(values, (str, bytes)) or not hasattr(values, '__len__'):
        raise ValueError(f'{WHERE}: {name} must be a list of numbers, got {values!r}')
    if size is None:
        size = len(values)
        if size == 0:
            raise ValueError(f'{WHERE}: {name} must not be empty')
    return tuple(float(v) for v in finite_vector(values, size, name, WHERE))


@dataclass(frozen=True)
class SafetyClamp:
    """Per-joint position limits and step limits; all state lives in `init_state`'s dict.

    Limits must be finite (so the parameters stay plain JSON); give a continuous joint a wide
    finite range instead.
    """

    lower: tuple[float, ...]  # joint position lower limits
    upper: tuple[float, ...]  # joint position upper limits
    max_step: tuple[float, ...]  # largest change of the command per tick, per joint

    def __post_init__(self):
        lower = _limits(self.lower, None, 'lower')
        upper = _limits(self.upper, len(lower), 'upper')
        max_step = _limits(self.max_step, len(lower), 'max_step')
        for j, (lo, hi) in enumerate(zip(lower, upper)):
            if lo > hi:
                raise ValueError(f'{WHERE}: lower[{j}]={lo} is above upper[{j}]={hi}')
        for j, step in enumerate(max_step):
            if step <= 0:
                raise ValueError(f'{WHERE}: max_step[{j}] must be > 0, got {step}')
        object.__setattr__(self, 'lower', lower)
        object.__setattr__(self, 'upper', upper)
        object.__setattr__(self, 'max_step', max_step)

    @property
    def joints(self) -> int:
        """Number of joints covered."""
        return len(self.lower)

    def to_dict(self) -> dict:
        """Return JSON-ready parameters that `from_dict` reads back."""
        return {name: list(getattr(self, name)) for name in ('lower', 'upper', 'max_step')}

    @classmethod
    def from_dict(cls, d) -> 'SafetyClamp':
        """Build from a dict; a scalar `max_step` applies to every joint."""
        names = [f.name for f in fields(cls)]
        check_keys(d, names, WHERE, required=names)
        max_step = d['max_step']
        if isinstance(max_step, numbers.Real) and hasattr(d['lower'], '__len__'):
            max_step = [max_step] * len(d['lower'])
        return cls(lower=d['lower'], upper=d['upper'], max_step=max_step)

    def init_state(self) -> dict:
        """Return the empty state: no previous command, so the next step uses the reference."""
        return {
            'prev': np.zeros(self.joints, dtype=np.float64),
            'has_prev': np.zeros(1, dtype=bool),
        }

    def step(self, state: dict, x, reference=None):
        """Clamp command x (J,); return (y (J,), info, new_state).

        The step limit is taken from the previous command, else from `reference` (measured
        joint positions), else not applied. info: `clamped_joints` (indices changed by either
        clip), `step_limited` and `limit_hit`.
        """
        check_state(state, self.init_state(), WHERE)
        x = finite_vector(x, self.joints, 'x', WHERE)
        if state['has_prev'][0]:
            base = state['prev']
        elif reference is not None:
            base = finite_vector(reference, self.joints, 'reference', WHERE)
        else:
            base = None
        limited = x
        if base is not None:
            step = np.asarray(self.max_step)
            limited = np.clip(x, base - step, base + step)
        y = np.clip(limited, np.asarray(self.lower), np.asarray(self.upper))
        by_step = limited != x
        by_limit = y != limited
        info = {
            'clamped_joints': np.flatnonzero(by_step | by_limit).tolist(),
            'step_limited': bool(by_step.any()),
            'limit_hit': bool(by_limit.any()),
        }
        new = copy_state(state)
        new['prev'][:] = y
        new['has_prev'][0] = True
        return y, info, new
