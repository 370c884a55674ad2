"""Types of the Python values that flow between stages (numpy, torch, scalars, strings)."""

import numpy as np

from lamp_ros.graph.types import TensorType


def is_tensor(value) -> bool:
    """numpy arrays and torch tensors (torch checked by name: no import needed)."""
    return isinstance(value, np.ndarray) or type(value).__module__.startswith('torch')


def type_of(value, role: str = 'activation', lifetime: str = 'tick') -> TensorType:
    """The TensorType of an actual value; raises TypeError for what cannot be an edge."""
    if isinstance(value, np.ndarray):
        return TensorType(value.dtype.name, tuple(int(d) for d in value.shape), 'cpu',
                          role=role, lifetime=lifetime)
    if type(value).__module__.startswith('torch') and hasattr(value, 'dtype'):
        dtype = str(value.dtype).removeprefix('torch.')
        return TensorType(dtype, tuple(int(d) for d in value.shape), str(value.device),
                          role=role, lifetime=lifetime)
    if isinstance(value, str):
        return TensorType('string', (), role=role, lifetime=lifetime)
    if isinstance(value, (bool, np.bool_)):
        return TensorType('bool', (), role=role, lifetime=lifetime)
    if isinstance(value, (int, np.integer)):
        return TensorType('int64', (), role=role, lifetime=lifetime)
    if isinstance(value, (float, np.floating)):
        return TensorType('float64', (), role=role, lifetime=lifetime)
    raise TypeError(f'{type(value).__name__} cannot flow on a graph edge')


def flatten(name: str, value) -> list:
    """[(path, leaf)] for dicts/lists/tuples of values: images -> images.base, ..."""
    if isinstance(value, dict):
        return [item for k, v in value.items() for item in flatten(f'{name}.{k}', v)]
    if isinstance(value, (list, tuple)):
        return [item for i, v in enumerate(value) for item in flatten(f'{name}.{i}', v)]
    return [(name, value)]
