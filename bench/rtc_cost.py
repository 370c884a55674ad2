"""What real-time chunking adds to one inference, each mode beside plain sampling, in one run.

    python3 bench/rtc_cost.py --spec SPEC --plain ARTIFACT --rtc ARTIFACT [--guided ARTIFACT]
                              [--runs 20] [--eager-runs 5] [--out FILE.json]

SPEC is the policy's spec (any merge mode); its eager pipeline times `infer` plain, in trained
mode (inpainting: the first 5 actions committed) and in guided mode (a gradient through the
expert at every Euler step), on the spec's device. PLAIN is the spec compiled as it is, RTC the
same spec compiled with `merge_mode: rtc` (trained: the committed actions and the delay are
inputs of its denoise stage), GUIDED (optional) with rtc mode guided (its denoise stage's
backward pass compiled too); `Runtime.infer` is timed on each, the rtc ones with no delay and
with 5 committed actions. Medians after warm-up; the device (the GPU's name) is in the report.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from lamp_ros.provenance import provenance  # noqa: E402  (ROOT on the path first)

DELAY = 5


def median_ms(fn, runs: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()   # every path returns numpy: the device has finished
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def eager_costs(spec_path: str, runs: int, device: str) -> dict:
    from lamp_ros.spec import load_spec
    from lamp_ros.trace.from_spec import build_pipeline
    pipeline = build_pipeline(load_spec(spec_path), device=device)
    policy = pipeline.policy
    obs = pipeline.example_observation(seed=1)
    free = policy.infer(obs)
    previous = free + 0.01
    guidance = {'end': len(free) // 2, 'schedule': 'linear', 'max_weight': 10.0}
    return {
        'plain': median_ms(lambda: policy.infer(obs), runs),
        'rtc/trained': median_ms(lambda: policy.infer(obs, committed=previous[:DELAY]), runs),
        'rtc/guided': median_ms(lambda: policy.infer(obs, committed=previous, delay=DELAY,
                                                     guidance=guidance), runs),
    }


def artifact_costs(plain: str, rtc: str, guided: str | None, obs_from: str,
                   runs: int) -> dict:
    from lamp_ros.runtime import Runtime
    from lamp_ros.spec import load_spec
    from lamp_ros.trace.from_spec import build_pipeline
    obs = build_pipeline(load_spec(obs_from)).example_observation(seed=1)
    out = {}
    runtime = Runtime.load(plain)
    out['plain'] = median_ms(lambda: runtime.infer(obs), runs)
    free = runtime.infer(obs)
    runtime.close()
    runtime = Runtime.load(rtc)
    out['rtc/trained, no delay'] = median_ms(lambda: runtime.infer(obs), runs)
    out[f'rtc/trained, delay {DELAY}'] = median_ms(
        lambda: runtime.infer(obs, committed=free[:DELAY] + 0.01), runs)
    out['ids'] = {'plain': Runtime.load(plain).id, 'rtc': runtime.id}
    runtime.close()
    if guided:
        runtime = Runtime.load(guided)
        out['rtc/guided, no delay'] = median_ms(lambda: runtime.infer(obs), runs)
        out[f'rtc/guided, delay {DELAY}'] = median_ms(lambda: runtime.infer(
            obs, committed=free + 0.01, delay=DELAY, end=len(free) // 2), runs)
        out['ids']['guided'] = runtime.id
        runtime.close()
    return out


def device_name(device: str) -> str:
    if device.startswith('cuda'):
        import torch
        return torch.cuda.get_device_name(0)
    return f'CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)'


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--spec', required=True)
    p.add_argument('--plain', required=True, help='the spec compiled as it is')
    p.add_argument('--rtc', required=True, help='the spec compiled with merge_mode rtc')
    p.add_argument('--guided', help='the spec compiled with merge_mode rtc, mode guided')
    p.add_argument('--device', default='cpu', help='the eager pipeline\'s device')
    p.add_argument('--runs', type=int, default=20)
    p.add_argument('--eager-runs', type=int, default=5)
    p.add_argument('--out', default=os.path.join(ROOT, 'bench', 'results', 'rtc_cost_cpu.json'))
    args = p.parse_args()
    report = {'device': device_name(args.device), 'spec': os.path.basename(args.spec),
              'delay': DELAY}
    print(f'device: {report["device"]}', flush=True)
    report['artifact_ms'] = artifact_costs(args.plain, args.rtc, args.guided, args.spec,
                                           args.runs)
    report['eager_ms'] = eager_costs(args.spec, args.eager_runs, args.device)
    report['provenance'] = provenance('cuda' if args.device.startswith('cuda') else 'cpu')
    for kind in ('artifact_ms', 'eager_ms'):
        base = report[kind]['plain']
        for name, ms in report[kind].items():
            if name != 'ids':
                print(f'{kind[:-3]:9s} {name:24s} {ms:9.2f} ms  x{ms / base:.2f}', flush=True)
    with open(args.out, 'w', encoding='utf-8') as f:
        json.dump(report, f, indent=1)
    print(f'wrote {args.out}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
