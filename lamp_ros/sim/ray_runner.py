"""`lamp eval --ray ADDRESS`: episodes as Ray tasks on a cluster, for sweeps that outgrow one
machine. Ray is an optional extra (`pip install ray`); each of `workers` Ray actors builds
its own controller and world from the setup once, and episodes are handed to whichever actor
is free. The artifact or spec path must be readable where the actors run (a shared folder).
"""


def run_on_ray(setup, episodes: int, workers: int, address: str):
    """Yield the episodes of `setup` as Ray actors finish them (any order)."""
    try:
        import ray
        from ray.util import ActorPool
    except ImportError as error:
        raise SystemExit(f'lamp eval --ray: Ray is not installed ({error}); it is an optional '
                         f'extra: pip install "ray==2.58.0"') from None
    from lamp_ros.sim.parallel import EpisodeRunner
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    try:
        runner = ray.remote(EpisodeRunner)
        pool = ActorPool([runner.remote(setup) for _ in range(workers)])
        yield from pool.map_unordered(lambda actor, index: actor.run.remote(index),
                                      range(episodes))
    finally:
        if started:
            ray.shutdown()
