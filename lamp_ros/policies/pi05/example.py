"""Example observations for pi0.5 on the simulated 7-joint arm: demos, tests, tracing, parity.

Like openpi's `make_*_example`: deterministic inputs of the right shapes, here with images of
different sizes per camera (a 640x480 base camera, 224x224 wrist cameras) so that resize-with-pad
is exercised on every call, and a state inside the norm stats' quantile range.
"""

from lamp_ros.observation import DEFAULT_PROMPT, example_observation as observation_of
from lamp_ros.ops.normalize import NormStats

DEFAULT_SIZES = {'base': (480, 640), 'left_wrist': (224, 224), 'right_wrist': (224, 224)}


def example_observation(norm_stats: NormStats, seed: int = 0, sizes: dict | None = None,
                        prompt: str = DEFAULT_PROMPT) -> dict:
    """Random-but-smooth images (gradients plus noise) and a state inside the quantile range."""
    return observation_of(DEFAULT_SIZES if sizes is None else sizes, norm_stats.state.q01,
                          norm_stats.state.q99, seed, prompt)
