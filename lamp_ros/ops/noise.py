"""Flow-matching noise that an episode can replay."""

import numpy as np


def sample_noise(seed: int, counter: int, shape) -> np.ndarray:
    """Standard normal noise for call `counter` of an episode: rng([seed, counter]).

    Counter-based rather than one running generator, so a replay of the same episode, or a
    compiled artifact, reproduces the eager policy's noise exactly, call by call.
    """
    return np.random.default_rng([seed, counter]).standard_normal(shape).astype(np.float32)
