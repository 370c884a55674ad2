"""The GPU kernels of an artifact's run, traced in a process of their own.

    python3 -m lamp_ros.whitebox.kernel_profile ARTIFACT TRACE.json[.gz] [--group NAME]
                                                [--runs N] [--cpu]

Loads the artifact (sync), runs one inference on the synthetic observation, then traces under
torch's profiler (backends/cuda/kernel_trace.py) either the cuda group NAME replayed N times on
that inference's values (`lamp profile`'s kernel table and timeline) or N whole inferences as a
tick runs them (bench/gpu_pi05.py --trace-out), and writes the Chrome trace.

Why a process of its own: on the H200, processes that had run torch's profiler over the
pi05_full artifact's CUDA graphs at times aborted at interpreter exit with "double free or
corruption" (`lamp profile` and a bare load-run-trace script alike; never in the runs without
the profiler; docs/notebook/), after every file was written: a teardown fault of the
profiler's CUPTI state beside CUDA graphs, not of the numbers. So `trace` runs this module as a
child, which leaves by os._exit once its trace is on disk (its only other state is memory the
OS takes back, as a multiprocessing fork child leaves), and the caller's process never holds
profiler state.
"""

import argparse
import json
import os
import subprocess
import sys


def trace(artifact: str, path: str, group: str = '', runs: int = 1, cpu: bool = False,
          timeout_s: float = 900.0) -> dict:
    """Run this module as a child process -> its summary ({'trace', 'group', 'runs', ...});
    ValueError with the child's own message when it refuses or fails."""
    cmd = [sys.executable, '-m', 'lamp_ros.whitebox.kernel_profile', artifact, path,
           '--runs', str(runs)] + (['--group', group] if group else []) + (
               ['--cpu'] if cpu else [])
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines or not lines[-1].startswith('{'):
        said = (done.stderr.strip().splitlines() or lines or ['no output'])[-1]
        raise ValueError(f'kernel trace of {artifact}{" group " + group if group else ""} '
                         f'failed (exit {done.returncode}): {said}')
    return json.loads(lines[-1])


def _cuda_runner(runtime, group: str):
    runners = {g.name: r for g, r in runtime.inference_runners}
    cuda = [g.name for g in runtime.artifact.plan.groups if g.backend == 'cuda']
    if group not in cuda or group not in runners:
        raise ValueError(f'no cuda group {group!r} in the artifact (cuda groups: '
                         f'{", ".join(cuda) or "none"})')
    return runners[group]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('artifact')
    parser.add_argument('trace')
    parser.add_argument('--group', default='', help='a cuda group, replayed; else inferences')
    parser.add_argument('--runs', type=int, default=1)
    parser.add_argument('--cpu', action='store_true', help="the CPU's activity too")
    args = parser.parse_args(argv)
    from lamp_ros.backends.cuda.kernel_trace import write_kernel_trace
    from lamp_ros.runtime import Runtime
    from lamp_ros.runtime.loop import synthetic_observation
    try:
        runtime = Runtime.load(args.artifact, execution='sync')
        feeds = runtime.feeds(synthetic_observation(runtime), 0.0)
        captured = {}
        runtime.reset()
        runtime.run(feeds, capture=captured)
        if args.group:
            runner = _cuda_runner(runtime, args.group)
            write_kernel_trace(lambda: runner.run(captured), args.trace, args.runs, args.cpu)
        else:
            def infer():
                runtime.reset()  # every run infers
                runtime.run(feeds)
            write_kernel_trace(infer, args.trace, args.runs, args.cpu)
        summary = {'trace': args.trace, 'group': args.group, 'runs': args.runs,
                   'artifact_id': runtime.id}
    except (ValueError, RuntimeError, OSError) as exc:
        print(f'{type(exc).__name__}: {exc}', file=sys.stderr, flush=True)
        return 2
    print(json.dumps(summary), flush=True)
    sys.stderr.flush()
    os._exit(0)  # see the module doc: no interpreter teardown after the profiler


if __name__ == '__main__':
    sys.exit(main())
