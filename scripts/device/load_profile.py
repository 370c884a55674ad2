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

--ab then times unprofiled loads in the order given, each in one of three forms: 'now' (the
code as it is), 'before' (what the runner did before the changes of 2026-12-02's seventh
session: torch's plain `torch.export.load`, two warm-up runs per prompt-length graph) and
'one_tensor' (the weights bound reading one tensor at a time through safetensors' safe_open
instead of each stage's file whole), and adds the wall times per form and the process's peak
resident memory after each load to load_times.json. The first load of a process pays for
CUDA's start, so a profiled load (--loads 1) before them keeps that out of the comparison; peak
memory only grows, so compare forms in processes of their own.
"""

import argparse
import cProfile
import io
import json
import os
import pstats
import resource
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
    from lamp_ros.backends import cuda, program_weights
    from lamp_ros.runtime import Runtime
    runs, peaks = {}, {}
    for form in forms:
        if form not in ('now', 'before', 'one_tensor'):
            raise SystemExit(f"--ab: unknown form {form!r} (now, before, one_tensor)")
        loader, warmups = cuda.load_program, cuda.CudaGraphRunner.warmup_runs
        reader = program_weights.load_file
        if form == 'before':
            cuda.load_program, cuda.CudaGraphRunner.warmup_runs = torch.export.load, 2
        if form == 'one_tensor':
            program_weights.load_file = OneTensorAtATime
        try:
            start = time.perf_counter()
            runtime = Runtime.load(artifact)
            seconds = round(time.perf_counter() - start, 2)
        finally:
            cuda.load_program, cuda.CudaGraphRunner.warmup_runs = loader, warmups
            program_weights.load_file = reader
        runtime.close()
        del runtime
        torch.cuda.empty_cache()
        runs.setdefault(form, []).append(seconds)
        peak_gb = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 2)  # KiB
        peaks.setdefault(form, []).append(peak_gb)
        print(f'load ({form}): {seconds} s, process peak resident {peak_gb} GB', flush=True)
    return {'seconds': runs, 'peak_resident_gb': peaks}


class OneTensorAtATime:
    """load_file's dict, but each tensor read from the file (safe_open) when it is taken."""

    def __init__(self, path):
        from safetensors import safe_open
        self.file = safe_open(path, framework='pt')
        self.names = set(self.file.keys())

    def __contains__(self, name):
        return name in self.names

    def pop(self, name):
        self.names.discard(name)
        return self.file.get_tensor(name)


if __name__ == '__main__':
    main()
