"""Programmatic dependent launch on and off in one artifact: the GPU time of its CUDA graph.

The build picks dependent launch per fused part from timings of that part alone (tuning.py);
this measures what it does to the whole graph. LAMP_PDL=0 launches the lamp kernels in plain
stream order (their grid-dependency wait then returns at once), so the same artifact is loaded,
captured and timed once per setting, in the order on, off, on (a drift of the machine shows as
a difference between the two 'on' runs). The actions must be the same bit for bit.

    python3 scripts/device/pdl_ab.py ARTIFACT [--runs 50] [--out FILE.json]
"""

import argparse
import json
import os

import torch

from bench.gpu_pi05 import load_artifact


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('artifact')
    parser.add_argument('--runs', type=int, default=50)
    parser.add_argument('--out', default='')
    args = parser.parse_args()
    report, actions = {'artifact': args.artifact, 'runs': args.runs, 'order': []}, {}
    for name, setting in (('on', '1'), ('off', '0'), ('on again', '1')):
        os.environ['LAMP_PDL'] = setting
        runtime, _, _, out, times, _ = load_artifact(args.artifact, args.runs)
        actions[name] = out
        report['order'].append({'pdl': name, 'lamp_ms_p50': times['lamp'][0],
                                'lamp_ms_p99': times['lamp'][1],
                                'inference_ms_p50': times['lamp_inference'][0]})
        print(report['order'][-1], flush=True)
        del runtime
        torch.cuda.empty_cache()
    report['actions_identical'] = all(torch.equal(actions['on'], a) for a in actions.values())
    on = (report['order'][0]['lamp_ms_p50'] + report['order'][2]['lamp_ms_p50']) / 2
    report['on_minus_off_ms'] = on - report['order'][1]['lamp_ms_p50']
    print(f"pdl on - off: {report['on_minus_off_ms']:+.3f} ms; actions identical: "
          f"{report['actions_identical']}", flush=True)
    if args.out:
        with open(args.out, 'w', encoding='utf-8') as f:
            json.dump(report, f, indent=1)


if __name__ == '__main__':
    main()
