# smoke: run by refactor_ab.sh
"""Two artifacts timed in one process, in turns: GPU time, whole inference and host stages.

    python3 scripts/device/artifact_ab.py A B [--runs 30] [--order a,b,a,b] [--out FILE]
                                          [--device cpu]

For a change that moves work between the host and the GPU (the device letterbox:
compiler/device_letterbox.py), `lamp_ms` alone says only half: each artifact is loaded and
timed as bench/gpu_pi05.py times it (`load_artifact`: its CUDA graphs' GPU time in plan order,
and the whole inference as a control tick runs it), in the order given (a drift of the shared
machine shows as a difference between two turns of one artifact), with the p50 of every host
node and group of its last window (`stage_times`). The actions of the two are compared
(identical bit for bit when both compute on the same pixels with the same kernels).

`--device cpu` (refactor_ab.sh's smoke): two CPU artifacts, loaded and timed by the same
`load_artifact`, with no GPU time (`lamp_ms` is None): the whole inference in plan order and as
a control tick runs it, and their model groups' actions compared.
"""

import argparse
import json

import torch

from bench.gpu_pi05 import load_artifact, stage_times
from lamp_ros.provenance import provenance

TIMES = ('lamp_ms', 'lamp_inference_ms', 'lamp_inference_serial_ms')


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('a')
    parser.add_argument('b')
    parser.add_argument('--runs', type=int, default=30)
    parser.add_argument('--order', default='a,b,a,b')
    parser.add_argument('--out', default='')
    parser.add_argument('--device', choices=('cuda', 'cpu'), default='cuda')
    args = parser.parse_args()
    order = args.order.split(',')
    if set(order) != {'a', 'b'}:
        parser.error('--order takes a and b, each at least once')
    paths = {'a': args.a, 'b': args.b}
    report = {'a': args.a, 'b': args.b, 'runs': args.runs, 'turns': []}
    actions = {}
    for which in order:
        loaded = load_artifact(paths[which], args.runs, device=args.device)
        runtime, _, _, out, times, peak, text = loaded
        if args.device == 'cpu':
            times['lamp'] = None  # the group's wall time there: no GPU time to compare
        actions.setdefault(which, out)
        turn = {'artifact': which, 'artifact_id': runtime.artifact.manifest['artifact_id'],
                'lamp_ms': times['lamp'], 'lamp_inference_ms': times['lamp_inference'],
                'lamp_inference_serial_ms': times['lamp_inference_serial'],
                'peak_gb': peak, 'text_length': text.get('lamp_text_length'),
                'stages_p50_ms': stage_times(runtime.profile())}
        report['turns'].append(turn)
        print(json.dumps({k: v for k, v in turn.items() if k != 'stages_p50_ms'}), flush=True)
        del runtime
        torch.cuda.empty_cache()

    def mean(which, key):
        values = [t[key][0] for t in report['turns'] if t['artifact'] == which]
        return sum(values) / len(values)
    measured = TIMES if args.device == 'cuda' else TIMES[1:]  # a CPU has no GPU time
    for key in measured:
        report[f'{key}_mean_p50'] = {w: mean(w, key) for w in ('a', 'b')}
        report[f'{key}_b_minus_a'] = mean('b', key) - mean('a', key)
    a, b = actions['a'], actions['b']
    report['actions_identical'] = bool(torch.equal(a, b))
    report['actions_max_rel_difference'] = float((a - b).abs().max() / a.abs().max())
    report['provenance'] = provenance(args.device)
    for key in measured:
        print(f'{key}: a {report[f"{key}_mean_p50"]["a"]:.3f}, b '
              f'{report[f"{key}_mean_p50"]["b"]:.3f}, b - a {report[f"{key}_b_minus_a"]:+.3f}')
    print(f'actions identical: {report["actions_identical"]} (max rel difference '
          f'{report["actions_max_rel_difference"]:.3g})', flush=True)
    if args.out:
        with open(args.out, 'w', encoding='utf-8') as f:
            json.dump(report, f, indent=1)


if __name__ == '__main__':
    main()
