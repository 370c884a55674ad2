"""How the simulated joints move: a first-order lag toward the commanded positions."""

import numpy as np


def follow(q: np.ndarray, target: np.ndarray, dt: float, tau: float) -> np.ndarray:
    """One step of dq/dt = (target - q) / tau, exact for dt >= tau (lands on target)."""
    return q + (target - q) * min(1.0, dt / tau)
