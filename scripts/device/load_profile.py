"""Where `Runtime.load` of a built artifact spends its time, under cProfile.

Usage: python3 scripts/device/load_profile.py ARTIFACT [--out DIR] [--loads 2]
                                                [--ab before,now,before,now]

pi05_full took 47-49 s to load on the H200 (the bench's 'artifact loaded in', and the build's
step from 'parity against the eager reference' to its first sample): a robot node's configure
waits that long, and it is a fifth of the build. This loads the artifact --loads times in one
process (the first pays for CUDA's and the libraries' start and any kernel compiles, the later
ones show what every load pays), each under its own profile, and writes load_N.txt (the 60
heaviest functions by cumulative and by own time) and load_N.prof (pstats, for snakeviz or
pstats) under --out, with load_times.json.

--ab then times unprofiled loads in the order given, each in one of two forms: 'now' (the
code as it is) and 'before' (what the runner did before the changes of 2026-12-03: torch's
plain `torch.export.load`, two warm-up runs per prompt-length graph), and adds the wall
times per form to load_times.json; the first load of a process pays for CUDA's start, so a
profiled load (--loads 1) before them keeps that out of the comparison.
"""

import argparse
import cProfile
import io
import json
import os
import pstats
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('artifact')
    ap.add_argument('--out', default='out/load_profile')
    ap.add_argument('--loads', type=int, default=2)
    ap.add_argument('--ab', default='', help="comma-separated forms: 'now' or 'before'")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    from lamp_ros.runtime import Runtime
    times = []
    for i in range(args.loads):
        profile = cProfile.Profile()
        start = time.perf_counter()
        profile.enable()
        runtime = Runtime.load(args.artifact)
        profile.disable()
        times.append(round(time.perf_counter() - start, 2))
        runtime.close()
        del runtime
        profile.dump_stats(os.path.join(args.out, f'load_{i}.prof'))
        text = io.StringIO()
        stats = pstats.Stats(profile, stream=text)
        stats.sort_stats('cumulative').print_stats(60)
        stats.sort_stats('tottime').print_stats(60)
        with open(os.path.join(args.out, f'load_{i}.txt'), 'w', encoding='utf-8') as f:
            f.write(text.getvalue().replace(os.getcwd() + os.sep, ''))  # repo-relative paths
        print(f'load {i}: {times[-1]} s (profiled)', flush=True)
    result = {'artifact': args.artifact, 'profiled_load_s': times}
    if args.ab:
        result['ab_load_s'] = timed_forms(args.artifact, args.ab.split(','))
    with open(os.path.join(args.out, 'load_times.json'), 'w', encoding='utf-8') as f:
        json.dump(result, f, indent=1)


def timed_forms(artifact: str, forms) -> dict:
    """Unprofiled Runtime.load wall times, per form, in the order given."""
    import torch
    from lamp_ros.backends import cuda
    from lamp_ros.runtime import Runtime
    runs = {}
    for form in forms:
        if form not in ('now', 'before'):
            raise SystemExit(f"--ab: unknown form {form!r} (now, before)")
        loader, warmups = cuda.load_program, cuda.CudaGraphRunner.warmup_runs
        if form == 'before':
            cuda.load_program, cuda.CudaGraphRunner.warmup_runs = torch.export.load, 2
        try:
            start = time.perf_counter()
            runtime = Runtime.load(artifact)
            seconds = round(time.perf_counter() - start, 2)
        finally:
            cuda.load_program, cuda.CudaGraphRunner.warmup_runs = loader, warmups
        runtime.close()
        del runtime
        torch.cuda.empty_cache()
        runs.setdefault(form, []).append(seconds)
        print(f'load ({form}): {seconds} s', flush=True)
    return runs


if __name__ == '__main__':
    main()
