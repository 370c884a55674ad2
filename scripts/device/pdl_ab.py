"""Programmatic dependent launch on and off in one artifact: the GPU time of its CUDA graph.

An artifact built on a Hopper GPU launches every lamp kernel of the expert's layers as a
dependent launch (kernels/lowering.py: expert_pdl; LAMP_EXPERT_PDL at build time sets the
mode); this measures what that does to the whole graph.
LAMP_PDL=0 launches the lamp kernels in plain stream order (their grid-dependency wait then
returns at once), so the same artifact is loaded, captured and timed once per setting, by
default in the order on, off, on (a drift of the machine shows as a difference between the two
'on' runs). The actions must be the same bit for bit.

    python3 scripts/device/pdl_ab.py ARTIFACT [--runs 50] [--order on,off,on] [--out FILE]

History: on 2026-11-30 (commit a40019e) a build that had put three parts on dependent launch
(its own per-part timings) timed 17.30 / 17.27 ms on and 17.18 off.
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
    parser.add_argument('--order', default='on,off,on', help='settings, in the order timed')
    parser.add_argument('--out', default='')
    args = parser.parse_args()
    report, actions = {'artifact': args.artifact, 'runs': args.runs, 'order': []}, {}
    order = args.order.split(',')
    if set(order) != {'on', 'off'}:
        parser.error('--order takes on and off, each at least once')
    for i, setting in enumerate(order):
        name = setting if setting not in order[:i] else f'{setting} again'
        os.environ['LAMP_PDL'] = '1' if setting == 'on' else '0'
        runtime, _, _, out, times, _ = load_artifact(args.artifact, args.runs)
        actions[name] = out
        report['order'].append({'pdl': name, 'lamp_ms_p50': times['lamp'][0],
                                'lamp_ms_p99': times['lamp'][1],
                                'inference_ms_p50': times['lamp_inference'][0]})
        print(report['order'][-1], flush=True)
        del runtime
        torch.cuda.empty_cache()
    report['actions_identical'] = all(torch.equal(actions['on'], a) for a in actions.values())

    def mean_p50(setting):
        runs = [r['lamp_ms_p50'] for r in report['order'] if r['pdl'].split()[0] == setting]
        return sum(runs) / len(runs)
    report['on_minus_off_ms'] = mean_p50('on') - mean_p50('off')
    print(f"pdl on - off: {report['on_minus_off_ms']:+.3f} ms; actions identical: "
          f"{report['actions_identical']}", flush=True)
    if args.out:
        with open(args.out, 'w', encoding='utf-8') as f:
            json.dump(report, f, indent=1)


if __name__ == '__main__':
    main()
