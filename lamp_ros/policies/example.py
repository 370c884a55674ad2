"""Example observations for the simulated 7-joint arm: demos, tests, tracing and parity runs.

Like openpi's `make_*_example`: deterministic inputs of the right shapes, here with images of
different sizes per camera (a 640x480 base camera, 224x224 wrist cameras) so that resize-with-pad
is exercised on every call.
"""

import numpy as np

from lamp_ros.ops.normalize import NormStats

DEFAULT_SIZES = {'base': (480, 640), 'left_wrist': (224, 224), 'right_wrist': (224, 224)}
DEFAULT_PROMPT = 'pick up the red cube and place it in the bowl'


def example_observation(norm_stats: NormStats, seed: int = 0, sizes: dict | None = None,
                        prompt: str = DEFAULT_PROMPT) -> dict:
    """Random-but-smooth images (gradients plus noise) and a state inside the quantile range."""
    rng = np.random.default_rng(seed)
    images = {}
    for slot, (h, w) in (DEFAULT_SIZES if sizes is None else sizes).items():
        yy, xx = np.mgrid[0:h, 0:w]
        base = np.stack([xx * 255 // max(w - 1, 1), yy * 255 // max(h - 1, 1),
                         (xx + yy) * 255 // max(h + w - 2, 1)], axis=-1)
        noise = rng.integers(-40, 41, size=(h, w, 3))
        images[slot] = np.clip(base + noise, 0, 255).astype(np.uint8)
    lo, hi = norm_stats.state.q01, norm_stats.state.q99
    state = (lo + (hi - lo) * rng.uniform(0.1, 0.9, size=lo.shape)).astype(np.float32)
    return {'images': images, 'state': state, 'prompt': prompt}
