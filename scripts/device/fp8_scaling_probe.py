"""Do the prefix's FP8 GEMMs run faster with their row scales applied outside the GEMM?

The artifact's FP8 GEMMs (fp8_prefix_mlp) give cuBLASLt a float32 scale per activation row and
per weight row (outer-vector scaling), for which cuBLASLt 13.1 offers one algorithm
(cublaslt_probe.py). The scales are powers of two, so scaling commutes exactly with the bf16
rounding of the output: bf16(acc * sx * sw) == bf16(acc) * sx * sw (away from overflow and
subnormals). So the same numbers come from a GEMM with scalar scales of 1 (cuBLASLt's common FP8
path) whose reader multiplies each output by its row's and column's scale: the GeGLU kernel
that reads gate/up, the norm kernel that adds down's output to the residual stream. This times
both GEMM forms at the prefix's shapes over `--layers` distinct weights a CUDA-graph launch and
checks that the rescaled output is the row-scaled one.

    python3 scripts/device/fp8_scaling_probe.py [--out FILE.json] [--layers 8]
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.getcwd())
from bench.probes import save_report  # noqa: E402
from lamp_ros.kernels import ops, tuning  # noqa: E402

DEV, BF, E4M3 = 'cuda', torch.bfloat16, torch.float8_e4m3fn
SHAPES = {  # name: (rows, K, N, fast accumulation) as fp8_prefix_mlp runs them
    'gate_up': (968, 2048, 32768, True),
    'down': (968, 16384, 2048, False),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--out', default='fp8_scaling_probe.json')
    parser.add_argument('--layers', type=int, default=8)
    args = parser.parse_args()
    report = {'gpu': torch.cuda.get_device_name(), 'torch': torch.__version__,
              'layers': args.layers, 'us_per_call': {}}
    one = torch.ones((), device=DEV)
    torch.manual_seed(0)
    for name, (m, k, n, fast) in SHAPES.items():
        x = torch.randn(m, k, device=DEV) * torch.logspace(-2, 2, m, device=DEV)[:, None]
        codes, sx = ops.fp8_rows_reference(x)
        codes = codes.to(E4M3)
        ws, sws = [], []
        for _ in range(args.layers):
            w_codes, sw = ops.fp8_rows_reference(torch.randn(n, k, device=DEV) / k ** 0.5)
            ws.append(w_codes.to(E4M3))
            sws.append(sw.view(1, -1))

        def rowwise(i):
            return torch._scaled_mm(codes, ws[i].t(), sx, sws[i], out_dtype=BF,
                                    use_fast_accum=fast)

        def tensorwise(i):
            return torch._scaled_mm(codes, ws[i].t(), one, one, out_dtype=BF,
                                    use_fast_accum=fast)
        want = rowwise(0)
        got = (tensorwise(0) * sx * sws[0]).to(BF)  # exact: powers of two
        differ = int((got != want).sum())
        rel = tuning.disagreement(got, want.float())
        times = {}
        for form, fn in (('rowwise', rowwise), ('tensorwise', tensorwise),
                         ('rowwise again', rowwise)):
            ms = tuning.gpu_time_ms(lambda: [fn(i) for i in range(args.layers)])
            times[form] = round(ms * 1e3 / args.layers, 2)
        report['us_per_call'][name] = dict(times, outputs_differing=differ, rel_diff=rel,
                                           fast_accumulation=fast)
        print(f'{name:8s} {m}x{k}->{n}: row-scaled {times["rowwise"]} us (again '
              f'{times["rowwise again"]}), scalar-scaled {times["tensorwise"]} us; rescaled '
              f'outputs differing {differ} of {want.numel()} (max rel {rel:.2g})', flush=True)
        save_report(report, args.out)


if __name__ == '__main__':
    main()
