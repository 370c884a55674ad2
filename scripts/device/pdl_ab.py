"""A run-time switch on and off in one artifact: the GPU time of its CUDA graph.

`--variable LAMP_PDL` (the default): programmatic dependent launch.

An artifact built on a Hopper GPU launches every lamp kernel of the expert's layers as a
dependent launch (kernels/lowering.py: expert_pdl; LAMP_EXPERT_PDL at build time sets the
mode); this measures what that does to the whole graph.
LAMP_PDL=0 launches the lamp kernels in plain stream order (their grid-dependency wait then
returns at once), so the same artifact is loaded, captured and timed once per setting, by
default in the order on, off, on (a drift of the machine shows as a difference between the two
'on' runs). The actions must be the same bit for bit.

`--variable LAMP_GEMM_ALGORITHMS`: the GEMMs on the cuBLASLt algorithms the build stored
(`lamp::lt_linear`), or off, torch's op for each, as on a machine where they may not run; the
actions then agree to the GEMMs' summation order (max rel difference reported), not bit for bit.

    python3 scripts/device/pdl_ab.py ARTIFACT [--runs 50] [--order on,off,on] [--out FILE]
        [--variable LAMP_PDL | LAMP_GEMM_ALGORITHMS]

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
    parser.add_argument('--variable', default='LAMP_PDL',
                        choices=('LAMP_PDL', 'LAMP_GEMM_ALGORITHMS'))
    args = parser.parse_args()
    report, actions = {'artifact': args.artifact, 'runs': args.runs, 'variable': args.variable,
                       'order': []}, {}
    order = args.order.split(',')
    if set(order) != {'on', 'off'}:
        parser.error('--order takes on and off, each at least once')
    for i, setting in enumerate(order):
        name = setting if setting not in order[:i] else f'{setting} again'
        os.environ[args.variable] = '1' if setting == 'on' else '0'
        runtime, _, _, out, times, _, _ = load_artifact(args.artifact, args.runs)
        actions[name] = out
        report['order'].append({'setting': name, 'lamp_ms_p50': times['lamp'][0],
                                'lamp_ms_p99': times['lamp'][1],
                                'inference_ms_p50': times['lamp_inference'][0]})
        print(report['order'][-1], flush=True)
        del runtime
        torch.cuda.empty_cache()
    report['actions_identical'] = all(torch.equal(actions['on'], a) for a in actions.values())
    scale = float(actions['on'].abs().max())
    report['actions_max_rel_difference'] = max(
        float((a - actions['on']).abs().max()) / scale for a in actions.values())

    def mean_p50(setting):
        runs = [r['lamp_ms_p50'] for r in report['order'] if r['setting'].split()[0] == setting]
        return sum(runs) / len(runs)
    report['on_minus_off_ms'] = mean_p50('on') - mean_p50('off')
    print(f"{args.variable} on - off: {report['on_minus_off_ms']:+.3f} ms; actions identical: "
          f"{report['actions_identical']} (max rel difference "
          f"{report['actions_max_rel_difference']:.3g})", flush=True)
    if args.out:
        with open(args.out, 'w', encoding='utf-8') as f:
            json.dump(report, f, indent=1)


if __name__ == '__main__':
    main()
