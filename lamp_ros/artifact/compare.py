"""One value against its reference: the rule of parity (the build's, `lamp verify`'s, replay's).

Floats pass within |a - b| <= atol + rtol * |b| (numpy allclose) and report the max abs and max
relative error (max abs / max |reference|); integers and booleans (ids, masks, uint8 pixels)
must match exactly; a non-finite value or another shape fails with the reason.
"""

import numpy as np


def compare(actual, expected, atol: float, rtol: float) -> dict:
    a, e = np.asarray(actual), np.asarray(expected)
    if a.shape != e.shape:
        return {'passed': False, 'error': f'shape {a.shape} != reference {e.shape}'}
    if a.dtype.kind in 'biu' or e.dtype.kind in 'biu':  # ids, masks, uint8 pixels: exact
        mismatches = int(np.count_nonzero(a != e))
        diff = np.abs(a.astype(np.int64) - e.astype(np.int64))  # no uint8 wrap-around
        return {'passed': mismatches == 0, 'mismatches': mismatches,
                'max_abs': float(diff.max()) if diff.size else 0.0}
    a64, e64 = a.astype(np.float64), e.astype(np.float64)
    if not np.isfinite(a64).all():
        return {'passed': False, 'error': 'non-finite values'}
    diff = np.abs(a64 - e64)
    scale = float(np.abs(e64).max()) if e64.size else 0.0
    max_abs = float(diff.max()) if diff.size else 0.0
    return {'passed': bool(np.all(diff <= atol + rtol * np.abs(e64))), 'max_abs': max_abs,
            'max_rel': max_abs / max(scale, 1e-12)}


def to_numpy(value):
    if type(value).__module__.startswith('torch'):
        return value.detach().float().cpu().numpy() if value.is_floating_point() \
            else value.detach().cpu().numpy()
    return value
