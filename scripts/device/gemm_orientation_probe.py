"""How fast does cuBLAS stream the expert's narrow GEMMs (o: 2048 -> 1024, down: 4096 -> 1024)
at 50 rows, in each orientation (and in FP8), against the split-K Triton kernel the artifact runs
today?

If a plain cuBLAS GEMM beat `lamp::gated_linear` by more than the gated residual add costs, that
add could move into the next norm kernel (which reads the row anyway) and o / down would become
cuBLAS calls. Every form runs once per layer on 18 distinct weights per timed launch (HBM, as in
the Euler step).

  linear     F.linear(a, W): (50 x K) @ W^T, W (N, K) as stored today
  mm_t       torch.mm(W, a^T) -> y^T (N x 50): the weight as cuBLAS's M side
  mm_kn      a @ Wt with Wt (K, N) contiguous: the weight stored transposed
  gated      lamp::gated_linear with the H200's tiles (today, gate and residual included)
  addcmul    the gated residual add alone (what moving it into the next norm would remove)
  fp8        torch._scaled_mm of e4m3 rows (a power-of-two scale per row, lamp::fp8_rows) and
             e4m3 weights (a scale per output channel), bf16 out: half the weight bytes
  fp8_fast   the same with cuBLAS's fast accumulation

    python3 scripts/device/gemm_orientation_probe.py [--out FILE.json] [--forms linear,fp8]

Measured on the H200 (2026-12-01, bench/results/gemm_orientation_probe_h200.json), per layer:
o linear 7.29 us, mm_t 8.45, mm_kn 5.74, against 6.37 for lamp::gated_linear with the gate and
residual included (the add alone 3.48); down 8.38 / 10.14 / 8.34 against 7.73; qkv 5.01 and
gate_up 7.20 as linear (mm_t 9.5 and 16.2). So moving the gated add into the next norm kernel
would save at most 0.6 us a layer on o (with its weight stored transposed) and lose on down: not
taken. cuBLAS's time at 50 rows is about 3.8 us plus 0.2 us per MB of weights.
FP8 (bench/results/gemm_fp8_probe_h200.json, --forms linear,fp8,fp8_fast): no faster at 50 rows
in spite of half the bytes: qkv 6.41 us against 5.03 in bf16, gate_up 7.05 (6.94 with fast
accumulation) against 7.17, o 8.42 against 7.28, down 13.06 against 8.34; rel. error 3.7e-2
against 1.7e-3 per GEMM. So the expert stays in bf16.
"""

import argparse
import json
import os
import sys

import torch
from torch.nn import functional as F

sys.path.insert(0, os.getcwd())
from lamp_ros.kernels import ops, tuning  # noqa: E402

ROWS, LAYERS, DEV, BF = 50, 18, 'cuda', torch.bfloat16
SHAPES = {'o': (1024, 2048), 'down': (1024, 4096), 'qkv': (2560, 1024), 'gate_up': (8192, 1024)}
TODAY = {'o': [64, 32, 128, 4, 4, 4, 0], 'down': [64, 32, 128, 4, 4, 4, 0]}  # tiles/nvidia_h200


def per_layer_us(fn):
    return round(tuning.gpu_time_ms(lambda: [fn(i) for i in range(LAYERS)]) * 1e3 / LAYERS, 2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--out', default='gemm_orientation_probe.json')
    parser.add_argument('--forms', default='', help='comma-separated forms (default: all)')
    args = parser.parse_args()
    torch.manual_seed(0)
    report = {'gpu': torch.cuda.get_device_name(), 'torch': torch.__version__}
    counters = torch.zeros(1024, dtype=torch.int32, device=DEV)
    for part, (n, k) in SHAPES.items():
        a = torch.randn(ROWS, k, dtype=BF, device=DEV)
        x = torch.randn(ROWS, n, dtype=BF, device=DEV)
        gate = torch.randn(n, device=DEV)
        ws = [torch.randn(n, k, dtype=BF, device=DEV) / k ** 0.5 for _ in range(LAYERS)]
        wts = [w.t().contiguous() for w in ws]
        want = F.linear(a.float(), ws[0].float())
        forms = {'linear': lambda i: F.linear(a, ws[i]),
                 'mm_t': lambda i: torch.mm(ws[i], a.t()),
                 'mm_kn': lambda i: torch.mm(a, wts[i])}
        codes, row_scale = ops.fp8_rows(a)
        w_scale = [w.float().abs().amax(1)[None, :] / 448.0 for w in ws]
        w8 = [(w.float() / sc.t()).to(torch.float8_e4m3fn) for w, sc in zip(ws, w_scale)]
        for name, fast in (('fp8', False), ('fp8_fast', True)):
            forms[name] = lambda i, fast=fast: torch._scaled_mm(
                codes, w8[i].t(), row_scale, w_scale[i], out_dtype=BF, use_fast_accum=fast)
        if part in TODAY:
            forms['gated'] = lambda i: ops.gated_linear(a, ws[i], x, gate, TODAY[part],
                                                        counters)
            y = F.linear(a, ws[0])
            forms['addcmul'] = lambda i: torch.addcmul(x, y, gate.to(BF))
        row = {}
        for name, fn in forms.items():
            if args.forms and name not in args.forms.split(','):
                continue
            got = fn(0).float()
            entry = {'us': per_layer_us(fn)}
            if name in ('linear', 'mm_t', 'mm_kn', 'fp8', 'fp8_fast'):
                got = got.t() if name == 'mm_t' else got
                entry['rel_error'] = float((got - want).norm() / want.norm())
            row[name] = entry
            print(part, name, entry, flush=True)
        report[f'{part} {ROWS}x{n}x{k}'] = row
        with open(args.out, 'w', encoding='utf-8') as f:
            json.dump(report, f, indent=1)


if __name__ == '__main__':
    main()
