"""`lamp eval`'s episodes in parallel: local worker processes (`--workers N`) or a Ray cluster
(`--ray ADDRESS`), with the same report as one process.

An `EvalSetup` is everything a worker needs to build its own controller and world (plain data,
sent to each worker once); each worker runs whole episodes by index, and the results are put
back in index order. An episode depends only on its index, the seed and the setup, so the
report is the same whichever worker ran it and however many there are.
"""

from concurrent.futures import as_completed, ProcessPoolExecutor
from dataclasses import dataclass
import multiprocessing

from lamp_ros.sim.evaluate import (check_fits, controller_for, describe_episode, report_of,
                                   run_episode)
from lamp_ros.sim.scene_world import SceneWorld


@dataclass(frozen=True)
class EvalSetup:
    path: str | None            # artifact or spec; None: the expert of a world
    world: str | None = None    # world name or file; None: the 2D scene
    moving: float | None = None  # the world's bin speed (m/s), if given
    merge_mode: str | None = None
    expert: bool = False
    seed: int = 0
    seconds: float | None = None   # None: the world's episode length
    latency_ticks: int = 0
    strip: bool = False            # keep frame strips of the overhead camera


class EpisodeRunner:
    """A controller and a world built from a setup, running episodes by index."""

    def __init__(self, setup: EvalSetup):
        world = None
        if setup.world:
            from lamp_ros.sim.world.env import WorldEnv
            from lamp_ros.sim.world.world import load_world
            world = load_world(setup.world)
            if setup.moving is not None:
                world = world.moving(setup.moving)
        self.setup = setup
        self.controller, slots, self.name = controller_for(setup.path, setup.merge_mode,
                                                           setup.expert, world)
        joint_names = getattr(getattr(self.controller, 'runtime', None), 'joint_names', None)
        if world is not None:
            self.env = WorldEnv(world, setup.seed)
        else:
            self.env = SceneWorld(self.controller.joints, setup.seed)
            slots = [s for s in slots if s in self.env.slots]
        check_fits(self.controller, joint_names, self.env)
        self.slots = tuple(slots)
        self.seconds = self.env.default_seconds if setup.seconds is None else setup.seconds
        self.strip_slot = next(iter(world.robot.cameras), None) if world is not None and \
            setup.strip else ('base' if setup.strip else None)

    def run(self, index: int):
        return run_episode(self.controller, self.env, index, self.seconds,
                           self.setup.latency_ticks, slots=self.slots,
                           strip_slot=self.strip_slot)

    def report(self, runs: list) -> dict:
        return report_of(runs, self.controller.rate_hz, self.env.name, self.env.unit,
                         self.seconds, self.setup.latency_ticks, self.setup.seed)

    def close(self) -> None:
        self.env.close()


_runner = None   # the worker process's own EpisodeRunner


def _start_worker(setup: EvalSetup) -> None:
    global _runner
    _runner = EpisodeRunner(setup)


def _run_in_worker(index: int):
    return _runner.run(index)


def run_episodes(setup: EvalSetup, episodes: int, workers: int = 1, ray_address: str | None = None,
                 progress=None) -> tuple:
    """(report, runs, controller name): `episodes` episodes of `setup`, here, in `workers`
    local processes, or on the Ray cluster at `ray_address`."""
    local = EpisodeRunner(setup)   # the report's rate, world and name (and, alone, the runs)
    runs = {}

    def done(episode) -> None:
        runs[episode.index] = episode
        if progress:
            progress(f'episode {episode.index + 1} ({len(runs)}/{episodes} done): '
                     f'{describe_episode(episode, local.env.unit)}')
    try:
        if ray_address:
            from lamp_ros.sim.ray_runner import run_on_ray
            for episode in run_on_ray(setup, episodes, max(1, workers), ray_address):
                done(episode)
        elif workers <= 1:
            for index in range(episodes):
                done(local.run(index))
        else:
            context = multiprocessing.get_context('spawn')   # no forked GL or DDS state
            with ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker,
                                     initargs=(setup,)) as pool:
                for future in as_completed([pool.submit(_run_in_worker, i)
                                            for i in range(episodes)]):
                    done(future.result())
        ordered = [runs[i] for i in range(episodes)]
        return local.report(ordered), ordered, local.name
    finally:
        local.close()
