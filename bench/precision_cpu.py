"""A planned low-precision artifact beside its full-precision build, in one run: speed and
closed-loop success.

    python3 bench/precision_cpu.py [--reference config/specs/pi05_tiny.yaml]
                                   [--planned config/specs/pi05_tiny_int8.yaml]
                                   [--episodes 20] [--runs 40]
                                   [--out bench/results/precision_cpu.json]

Both specs are compiled here (the planned one makes its precision plan, compiler/
precision_plan.py). `Runtime.infer` of the two artifacts is timed interleaved on one example
observation (medians: shared CPUs drift, interleaving makes the ratio fair), and `lamp eval`'s
closed loop runs the same episodes (same seed) with each: success rate, mean error, RMS jerk.
The plan itself (layers, their error, the back-off) is in the planned artifact's
evidence/precision.json and .png, copied beside the report.
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from lamp_ros.compiler.build import compile_spec  # noqa: E402
from lamp_ros.provenance import provenance  # noqa: E402
from lamp_ros.runtime import Runtime  # noqa: E402
from lamp_ros.sim.evaluate import compare, controller_for, evaluate  # noqa: E402
from lamp_ros.spec import load_spec  # noqa: E402
from lamp_ros.trace.from_spec import build_pipeline  # noqa: E402


def interleaved_ms(paths: dict, observation, runs: int) -> dict:
    """{name: median ms of Runtime.infer}, the artifacts called in turn."""
    runtimes = {name: Runtime.load(path) for name, path in paths.items()}
    for runtime in runtimes.values():
        for _ in range(3):
            runtime.infer(observation)
    times = {name: [] for name in runtimes}
    for _ in range(runs):
        for name, runtime in runtimes.items():
            start = time.perf_counter()
            runtime.infer(observation)
            times[name].append((time.perf_counter() - start) * 1e3)
    for runtime in runtimes.values():
        runtime.close()
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--reference', default='config/specs/pi05_tiny.yaml')
    p.add_argument('--planned', default='config/specs/pi05_tiny_int8.yaml')
    p.add_argument('--episodes', type=int, default=20)
    p.add_argument('--seconds', type=float, default=10.0)
    p.add_argument('--runs', type=int, default=40)
    p.add_argument('--out', default=os.path.join(ROOT, 'bench', 'results', 'precision_cpu.json'))
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix='precision-bench-')
    try:
        paths, built = {}, {}
        for name, spec in (('reference', args.reference), ('planned', args.planned)):
            paths[name] = os.path.join(work, name)
            start = time.perf_counter()
            result = compile_spec(spec, paths[name],
                                  progress=lambda m, n=name: print(f'[{n}] {m}', flush=True))
            built[name] = {'spec': os.path.basename(spec), 'id': result.artifact_id,
                           'build_s': round(time.perf_counter() - start, 1),
                           'parity_passed': result.parity_passed}
        observation = build_pipeline(load_spec(args.reference)).example_observation(seed=1)
        ms = interleaved_ms(paths, observation, args.runs)
        print(f'infer: reference {ms["reference"]:.2f} ms, planned {ms["planned"]:.2f} ms, '
              f'speed-up x{ms["reference"] / ms["planned"]:.2f}', flush=True)
        reports = {}
        for name, path in paths.items():
            control, slots, _ = controller_for(path)
            reports[name] = evaluate(control, args.episodes, args.seconds, slots=slots)
            print(f'{name}: success {reports[name]["success_rate"]:.0%}, mean error '
                  f'{reports[name]["mean_error"]:.1f} px', flush=True)
        side = compare(reports['reference'], reports['planned'])
        with open(os.path.join(paths['planned'], 'evidence', 'precision.json')) as f:
            plan = json.load(f)
        report = {'cpu': f'{os.cpu_count()} cores', 'artifacts': built, 'infer_ms': ms,
                  'speed_up': ms['reference'] / ms['planned'], 'closed_loop': side,
                  'plan': {g: {k: v[k] for k in ('precision', 'chosen', 'macs_lowered',
                                                 'macs_candidates', 'combined', 'steps')}
                           for g, v in plan['groups'].items()},
                  'provenance': provenance('cpu')}
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, 'w', encoding='utf-8') as f:
            json.dump(report, f, indent=1)
        shutil.copyfile(os.path.join(paths['planned'], 'evidence', 'precision.png'),
                        os.path.splitext(args.out)[0] + '.plan.png')
        print(f'success: reference {side["a"]["success_rate"]:.0%}, planned '
              f'{side["b"]["success_rate"]:.0%} ({side["delta"]["success_rate"] * 100:+.0f} '
              f'points); wrote {args.out}')
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
