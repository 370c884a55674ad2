"""The pick-and-place task: put the cube in the bin and let go of it.

Each episode places the cube at its own random position and yaw on the table (from the
episode's seed and index) and, in the moving variant, phases the bin's back-and-forth slide.
Success is judged from the physics state at the end of the episode: the cube's centre inside
the bin's inner walls, below the rim, and not touching the fingers (released). The task's error
is the horizontal distance (m) from the cube's centre to the bin's centre, at every tick.
"""

from dataclasses import dataclass
import math

import numpy as np

from lamp_ros.sim.world.world import PickPlaceOptions


@dataclass(frozen=True)
class PickPlaceEpisode:
    index: int
    cube_xy: tuple
    cube_yaw: float
    bin_phase: float         # where along its travel the bin starts, 0..1

    @classmethod
    def draw(cls, options: PickPlaceOptions, seed: int, index: int) -> 'PickPlaceEpisode':
        rng = np.random.default_rng([seed, index])
        return cls(index, (float(rng.uniform(*options.cube_x)),
                           float(rng.uniform(*options.cube_y))),
                   float(rng.uniform(*options.cube_yaw)), float(rng.uniform(0.0, 1.0)))


def bin_xy(options: PickPlaceOptions, episode: PickPlaceEpisode, t: float) -> tuple:
    """The bin's centre at time t: at rest, or sliding along x at `speed` m/s between
    x - travel/2 and x + travel/2 (a triangle wave)."""
    x, y = options.bin_xy
    if options.speed <= 0 or options.travel <= 0:
        return x, y
    period = 2 * options.travel / options.speed
    s = (t / period + episode.bin_phase) % 1.0
    along = 2 * s if s < 0.5 else 2 - 2 * s      # 0..1..0
    return x + options.travel * (along - 0.5), y


def error_m(cube_pos, bin_centre) -> float:
    """Horizontal distance (m) from the cube's centre to the bin's centre."""
    return math.hypot(cube_pos[0] - bin_centre[0], cube_pos[1] - bin_centre[1])


def in_bin(options: PickPlaceOptions, cube_pos, bin_centre) -> bool:
    """The cube's centre inside the bin's inner walls and below its rim."""
    dx, dy = abs(cube_pos[0] - bin_centre[0]), abs(cube_pos[1] - bin_centre[1])
    lx, ly = options.bin_inner
    return dx < lx / 2 and dy < ly / 2 and cube_pos[2] < options.bin_height + options.bin_wall


def succeeded(options: PickPlaceOptions, cube_pos, bin_centre, held: bool) -> bool:
    return bool(in_bin(options, cube_pos, bin_centre)) and not held


def outcome(options: PickPlaceOptions, cube_pos, bin_centre, held: bool) -> str:
    """Where the episode left the cube, in words (the report's per-episode `outcome`)."""
    if succeeded(options, cube_pos, bin_centre, held):
        return 'in the bin, released'
    if held:
        return 'still in the hand'
    if in_bin(options, (cube_pos[0], cube_pos[1], 0.0), bin_centre):
        return 'over the bin, not in it'
    if cube_pos[2] < -0.1:
        return 'fell off the table'
    return f'on the table, {error_m(cube_pos, bin_centre):.2f} m from the bin centre'
