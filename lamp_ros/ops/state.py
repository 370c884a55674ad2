"""Checks shared by the stateful operators (chunker, smoother, clamp).

The operators keep no state of their own: the runtime holds each operator's state as a dict of
plain numpy arrays, so it can be saved, restored and reset. These helpers keep that contract
in one place: states are copied rather than mutated, and states or parameters loaded from a
file are checked before they can steer the arm.
"""

import numpy as np


def copy_state(state: dict) -> dict:
    """Return a deep copy, so a step never changes the state it was given."""
    return {key: np.array(value, copy=True) for key, value in state.items()}


def check_keys(d, allowed, where: str, required=()) -> None:
    """Reject a non-dict, unknown keys and missing required keys; errors name the key."""
    if not isinstance(d, dict):
        raise ValueError(f'{where} must be a dict, got {type(d).__name__}')
    for key in d:
        if key not in allowed:
            raise ValueError(f'{where}: unknown key {key!r}; known: {sorted(allowed)}')
    for key in required:
        if key not in d:
            raise ValueError(f'{where}: key {key!r} is missing')


def check_state(state, template: dict, where: str) -> None:
    """Check that `state` has exactly the keys, shapes and dtypes of `template`.

    A state restored from disk for another robot (other joint count or horizon) must fail
    here, naming the key, rather than broadcast silently into wrong commands.
    """
    check_keys(state, template, f'{where} state', required=template)
    for key, ref in template.items():
        value = state[key]
        if not isinstance(value, np.ndarray):
            raise ValueError(f'{where} state[{key!r}] must be a numpy array')
        if value.shape != ref.shape or value.dtype != ref.dtype:
            raise ValueError(
                f'{where} state[{key!r}] must be {ref.dtype} {ref.shape}, '
                f'got {value.dtype} {value.shape}')


def finite_vector(x, size: int, name: str, where: str) -> np.ndarray:
    """Return x as a new float64 (size,) array; errors name `name` and the first bad joint."""
    try:
        arr = np.array(x, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f'{where}: {name} must be numbers: {e}') from e
    if arr.shape != (size,):
        raise ValueError(f'{where}: {name} must have shape ({size},), got {arr.shape}')
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        joint = int(bad[0])
        raise ValueError(f'{where}: {name}[{joint}] is {arr[joint]} (joint {joint} not finite)')
    return arr


def check_positive_int(value, name: str, where: str) -> None:
    """Reject bools, floats and values < 1 for counts such as `joints` or `horizon`."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f'{where}: {name} must be an integer >= 1, got {value!r}')


def check_finite_float(value, name: str, where: str) -> float:
    """Return value as a float, rejecting non-numbers, NaN and infinity by name."""
    if isinstance(value, bool):
        raise ValueError(f'{where}: {name} must be a number, got {value!r}')
    try:
        number = float(value)
    except (TypeError, ValueError) as e:
        raise ValueError(f'{where}: {name} must be a number, got {value!r}') from e
    if not np.isfinite(number):
        raise ValueError(f'{where}: {name} must be finite, got {number}')
    return number
