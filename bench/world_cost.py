"""What a control tick of a MuJoCo world costs on this machine: physics up to the next tick,
and rendering each camera, with the world's rendering options and with shadows and
multisampling on (the published scene's own settings), side by side in one run.

    python3 bench/world_cost.py [--world viperx_pick_place] [--ticks 200]
        [--out bench/results/world_cost_cpu.json]

The arm is driven by the scripted expert through real episodes, so contacts happen as in an
evaluation. Absolute times on a shared CPU are noise; the ratios (rendering vs physics, default
vs published rendering settings) and the camera rate they leave at 22 Hz are what count.
"""

import argparse
from dataclasses import replace
import json
import os
import statistics
import time

from lamp_ros.provenance import provenance
from lamp_ros.sim.world.expert import PickPlaceExpert
from lamp_ros.sim.world.physics import MujocoWorld
from lamp_ros.sim.world.pick_place import PickPlaceEpisode
from lamp_ros.sim.world.world import load_world

RATE_HZ = 22.0


def measure(world, ticks: int) -> dict:
    """Median ms of the physics per tick and of one frame per camera, over `ticks` ticks."""
    sim = MujocoWorld(world)
    expert = PickPlaceExpert(sim, [j.max_step for j in world.robot.joints])
    physics, frames = [], {slot: [] for slot in world.robot.cameras}
    episode = 0
    try:
        while len(physics) < ticks:
            sim.reset(PickPlaceEpisode.draw(world.task, 0, episode))
            expert.reset()
            for k in range(1, int(world.task.seconds * RATE_HZ) + 1):
                if len(physics) >= ticks:
                    break
                t = k / RATE_HZ
                start = time.perf_counter()
                sim.command(expert(t))
                sim.advance(t)
                physics.append(time.perf_counter() - start)
                for slot, camera in world.robot.cameras.items():
                    start = time.perf_counter()
                    sim.frame(slot, camera.width, camera.height)
                    frames[slot].append(time.perf_counter() - start)
            episode += 1
    finally:
        sim.close()
    return {'physics_ms_per_tick': 1e3 * statistics.median(physics),
            'steps_per_tick': round(1 / RATE_HZ / sim.model.opt.timestep),
            'frame_ms': {slot: 1e3 * statistics.median(v) for slot, v in frames.items()},
            'frame_size': {slot: f'{c.width}x{c.height}' for slot, c in
                           world.robot.cameras.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--world', default='viperx_pick_place')
    parser.add_argument('--ticks', type=int, default=200)
    parser.add_argument('--out', default='bench/results/world_cost_cpu.json')
    args = parser.parse_args()
    world = load_world(args.world)
    results = {}
    for name, variant in (('world settings', world),
                          ('shadows + multisample (published scene)',
                           replace(world, shadows=True, multisample=True))):
        results[name] = figures = measure(variant, args.ticks)
        frames = sum(figures['frame_ms'].values())
        print(f'{name}: physics {figures["physics_ms_per_tick"]:.2f} ms per tick '
              f'({figures["steps_per_tick"]} steps), frames '
              + ', '.join(f'{s} {v:.1f} ms' for s, v in figures['frame_ms'].items())
              + f'; all cameras once: {frames:.1f} ms = {frames / (1e3 / RATE_HZ):.0%} of a '
              f'{RATE_HZ:g} Hz tick')
    fast, slow = (sum(r['frame_ms'].values()) for r in results.values())
    results['render_ratio'] = slow / fast
    print(f'shadows + multisample cost {slow / fast:.1f}x the frame time of the world settings')
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, 'w', encoding='utf-8') as f:
        json.dump({**results, 'world': args.world, 'ticks': args.ticks,
                   'provenance': provenance()}, f, indent=1)
    print(f'wrote {args.out}')


if __name__ == '__main__':
    main()
