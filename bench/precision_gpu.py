"""Precision choices for one policy on one GPU, side by side in one run: each artifact's GPU
latency and its actions' error against the float32 eager policy.

    python3 bench/precision_gpu.py --spec SPEC --artifact NAME=PATH [--artifact NAME=PATH ...]
                                   [--runs 200] [--held-out 8] [--skip 4] [--out FILE.json]
                                   [--device cpu]

SPEC's eager pipeline, in float32 on the GPU, is the reference. The observations are the
spec's parity observations after the first `--skip` (a precision plan calibrates on the first
ones: these are held out). Per artifact:
- the action chunk (robot units) on each held-out observation: the lowest cosine against the
  reference's, and max |error| / max |reference|;
- the GPU time of its cuda group (CUDA events around the graphs, the runtime's profile) and
  the whole inference's wall time, p50 and p99 over `--runs` inferences of one observation,
  the artifacts taking turns in blocks of 20 so that drift hits all alike;
- its build time (evidence/build.json) and, for a planned one, what its plan chose.
Writes the JSON and, beside it, a PNG (latency against error).

`--device cpu` (scripts/device/precision_gpu.sh's smoke): CPU artifacts against the float32
eager policy on the CPU; with no GPU time, the whole inference is timed and drawn.
"""

import argparse
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from lamp_ros.provenance import provenance  # noqa: E402  (ROOT on the path first)

BLOCK = 20


def reference_chunks(pipeline, observations: list, chunk_value: str, aliases: dict):
    """The float32 eager policy's action chunks (robot units), one per observation."""
    from lamp_ros.trace.from_spec import trace_pipeline
    chunks = []
    for obs in observations:
        values = {}
        trace_pipeline(pipeline, obs, export=False, values_out=values, hash_weights=False)
        value = values[aliases.get(chunk_value, chunk_value)]
        value = value.detach().float().cpu().numpy() if hasattr(value, 'detach') else value
        chunks.append(np.asarray(value, np.float64))
    return chunks


def artifact_chunks(runtime, observations: list) -> list:
    chunks = []
    for obs in observations:
        runtime.reset()
        values = {}
        runtime.run(runtime.feeds(obs, 0.0), capture=values)
        chunks.append(np.asarray(values[runtime.chunk_value], np.float64))
    return chunks


def build_summary(path: str) -> dict:
    """Build seconds and, for a planned artifact, its plan in numbers."""
    with open(os.path.join(path, 'evidence', 'build.json'), encoding='utf-8') as f:
        build = json.load(f)
    out = {'build_s': round(sum(build['stage_seconds'].values()), 1),
           'stage_seconds': build['stage_seconds']}
    precision = os.path.join(path, 'evidence', 'precision.json')
    if os.path.exists(precision):
        with open(precision, encoding='utf-8') as f:
            plan = json.load(f)
        out['plan'] = {'budget': plan['budget'], 'groups': {
            name: {'chosen': len(g['chosen']), 'linears': len(g['layers']),
                   'measured': sum('cosine' in r for r in g['layers'].values()),
                   'saved_ms_estimate': g.get('saved_ms'), 'combined': g.get('combined')}
            for name, g in plan['groups'].items()}}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--spec', required=True)
    ap.add_argument('--artifact', action='append', required=True, metavar='NAME=PATH')
    ap.add_argument('--runs', type=int, default=200)
    ap.add_argument('--held-out', type=int, default=8)
    ap.add_argument('--skip', type=int, default=4)
    ap.add_argument('--out', default='precision_gpu.json')
    ap.add_argument('--device', choices=('cuda', 'cpu'), default='cuda')
    args = ap.parse_args()
    on_gpu = args.device == 'cuda'
    import torch
    from lamp_ros.artifact.load import open_artifact
    from lamp_ros.compiler.parity import eager_names, parity_observations
    from lamp_ros.compiler.precision_plan import action_error
    from lamp_ros.runtime import Runtime
    from lamp_ros.spec import load_spec
    from lamp_ros.trace.from_spec import build_pipeline

    named = [a.split('=', 1) for a in args.artifact]
    pipeline = build_pipeline(load_spec(args.spec), device=args.device)
    observations = parity_observations(pipeline, args.skip + args.held_out)[args.skip:]
    first = open_artifact(named[0][1])
    chunk = next(n for n in first.graph.nodes if n.op == 'chunker')
    chunk_value = dict(zip(chunk.ports, chunk.inputs))['chunk']
    print(f'float32 eager reference on {len(observations)} held-out observations', flush=True)
    reference = reference_chunks(pipeline, observations, chunk_value, eager_names(first.graph))
    del pipeline
    torch.cuda.empty_cache()
    runtimes = {}
    for name, path in named:
        print(f'load {name}: {path}', flush=True)
        runtimes[name] = Runtime.load(path, profile_window=args.runs)
    report = {'gpu': torch.cuda.get_device_name(0) if on_gpu else provenance('cpu')['card'],
              'torch': torch.__version__,
              'spec': os.path.basename(args.spec), 'runs': args.runs,
              'held_out_observations': len(observations), 'artifacts': {}}
    for name, runtime in runtimes.items():
        error = action_error(artifact_chunks(runtime, observations), reference)
        report['artifacts'][name] = {'artifact_id': runtime.id, **error,
                                     **build_summary(runtime.artifact.root)}
        print(f'{name}: cosine {error["cosine"]:.6f}, max rel {error["max_rel"]:.4f}',
              flush=True)
    feeds = {name: rt.feeds(observations[0], 0.0) for name, rt in runtimes.items()}
    for name, rt in runtimes.items():  # warm-up, then the profiles hold the measured runs
        for _ in range(10):
            rt.reset()
            rt.run(feeds[name])
        rt.profiler.reset()
    block = min(BLOCK, args.runs)
    for _ in range(0, args.runs, block):
        for name, rt in runtimes.items():
            for _ in range(block):
                rt.reset()  # every run infers
                rt.run(feeds[name])
    for name, rt in runtimes.items():
        profile = rt.profile()
        inference, entry = profile['inference'], report['artifacts'][name]
        gpu = ''
        if on_gpu:  # the cuda group's CUDA graphs (a CPU artifact has none)
            (group,) = [g for g in rt.artifact.plan.groups if g.backend == 'cuda']
            times = profile['gpu'][group.name]
            entry.update(gpu_p50_ms=times['p50_ms'], gpu_p99_ms=times['p99_ms'])
            gpu = f'GPU p50 {times["p50_ms"]:.2f} ms p99 {times["p99_ms"]:.2f} ms; '
        entry.update(inference_p50_ms=inference['p50_ms'], inference_p99_ms=inference['p99_ms'])
        print(f'{name}: {gpu}inference p50 {inference["p50_ms"]:.2f} ms; cosine '
              f'{entry["cosine"]:.6f}, max rel {entry["max_rel"]:.4f}; build '
              f'{entry["build_s"]} s', flush=True)
    report['provenance'] = provenance(args.device)
    with open(args.out, 'w', encoding='utf-8') as f:
        json.dump(report, f, indent=1)
    draw(report, os.path.splitext(args.out)[0] + '.png')
    return 0


def draw(report: dict, path: str) -> None:
    from matplotlib.figure import Figure
    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    kind = 'gpu' if all('gpu_p50_ms' in a for a in report['artifacts'].values()) else 'inference'
    for name, a in report['artifacts'].items():
        error = max(1.0 - a['cosine'], 1e-12)  # a float32 artifact can match exactly: log axis
        ax.errorbar(a[f'{kind}_p50_ms'], error,
                    xerr=[[0], [a[f'{kind}_p99_ms'] - a[f'{kind}_p50_ms']]], fmt='o', capsize=3)
        ax.annotate(f'{name}\nmax rel {a["max_rel"]:.3f}', (a[f'{kind}_p50_ms'], error),
                    fontsize=7, xytext=(4, 4), textcoords='offset points')
    ax.set_yscale('log')
    ax.set_xlabel({'gpu': 'GPU ms per inference (p50, bar to p99)',
                   'inference': 'ms per whole inference (p50, bar to p99)'}[kind])
    ax.set_ylabel('1 - cosine of the actions vs float32 eager')
    ax.set_title(f'{report["spec"]} on {report["gpu"]}')
    fig.tight_layout()
    fig.savefig(path)


if __name__ == '__main__':
    sys.exit(main())
