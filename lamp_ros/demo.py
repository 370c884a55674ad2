"""The README's main job. For now: build the tiny policy, save its weights under artifacts/,
run inference on example observations and show the action chunk and the timing.
"""

import os
import statistics
import time

from rich.console import Console
from rich.table import Table

ARTIFACTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                         'artifacts')


def run_demo(preset: str = 'pi05_tiny', seed: int = 0, runs: int = 20) -> int:
    """Build (or reload) the policy weights, time `runs` inferences, print a summary."""
    from lamp_ros.policies.example import example_observation
    from lamp_ros.policies.policy import Pi05Policy
    from lamp_ros.policies.weights import save_weights

    console = Console()
    weights = os.path.join(ARTIFACTS, f'{preset}_seed{seed}.safetensors')
    with console.status(f'building {preset}'):
        if os.path.exists(weights):
            policy = Pi05Policy.create(preset, weights=weights)
            source = f'loaded {os.path.relpath(weights)}'
        else:
            policy = Pi05Policy.create(preset, seed=seed)
            os.makedirs(ARTIFACTS, exist_ok=True)
            save_weights(policy.model, weights, {'preset': preset, 'seed': seed})
            source = f'built from seed {seed}, saved {os.path.relpath(weights)}'
    console.print(f'[bold]{preset}[/]: {source}')

    observation = example_observation(policy.norm_stats, seed=seed)
    actions = policy.infer(observation)  # warm-up
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        actions = policy.infer(observation)
        times.append((time.perf_counter() - start) * 1e3)

    table = Table(title=f'action chunk {actions.shape} (first 3 of {actions.shape[0]} steps)')
    for name in policy.joint_names:
        table.add_column(name, justify='right')
    for row in actions[:3]:
        table.add_row(*(f'{v:+.4f}' for v in row))
    console.print(table)
    times.sort()
    console.print(f'inference over {runs} runs: median {statistics.median(times):.1f} ms, '
                  f'p90 {times[int(0.9 * (len(times) - 1))]:.1f} ms, '
                  f'-> {1e3 / statistics.median(times):.1f} chunks/s')
    return 0
