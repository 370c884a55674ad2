"""`lamp bench`: the eager Python reference and the compiled runtime, side by side in one run.

Both run a full inference tick on the same observation, interleaved (reference, runtime,
reference, ...) so that machine noise hits both alike; the ratio is the figure that counts.
The eager pipeline is rebuilt from the spec stored in the artifact, its paths (checkpoint,
tokenizer) resolved against the artifact's folder (spec.load_artifact_spec), wherever the
command runs.
"""

import statistics
import time


def bench_artifact(path: str, runs: int = 30, warmup: int = 3, progress=None) -> dict:
    """`progress(message)`, when given, hears each step and every tenth run."""
    from lamp_ros.spec import load_artifact_spec
    from lamp_ros.runtime import Runtime
    from lamp_ros.runtime.loop import synthetic_observation
    from lamp_ros.trace.from_spec import build_pipeline

    say = progress or (lambda message: None)
    say(f'load the artifact {path}')
    runtime = Runtime.load(path)
    spec = load_artifact_spec(path)
    say(f'build the eager reference from its spec ({spec.name})')
    pipeline = build_pipeline(spec)
    obs = synthetic_observation(runtime)
    feeds = runtime.feeds(obs, 0.0)
    ref_ms, rt_ms = [], []
    say(f'{warmup} warm-up runs, then {runs} timed runs of each')
    for i in range(warmup + runs):
        pipeline.reset()
        start = time.perf_counter()
        pipeline.tick(obs, 0.0)
        ref = (time.perf_counter() - start) * 1e3
        runtime.reset()
        start = time.perf_counter()
        runtime.run(feeds)
        rt = (time.perf_counter() - start) * 1e3
        if i >= warmup:
            ref_ms.append(ref)
            rt_ms.append(rt)
            if len(ref_ms) % 10 == 0 or len(ref_ms) == runs:
                say(f'run {len(ref_ms)}/{runs}: eager {statistics.median(ref_ms):.2f} ms, '
                    f'runtime {statistics.median(rt_ms):.2f} ms (medians so far)')
    profile = runtime.profile()
    reference, compiled = statistics.median(ref_ms), statistics.median(rt_ms)
    return {
        'artifact_id': runtime.id, 'runs': runs, 'device': runtime.device,
        'reference_ms': reference, 'runtime_ms': compiled, 'speedup': reference / compiled,
        'reference_p90_ms': sorted(ref_ms)[int(0.9 * (runs - 1))],
        'runtime_p90_ms': sorted(rt_ms)[int(0.9 * (runs - 1))],
        'groups_ms': {name: s['p50_ms'] for name, s in profile['groups'].items()},
        'nodes_ms': {name: s['p50_ms'] for name, s in profile['nodes'].items()},
    }
