"""Would FP8 (e4m3) GEMMs pay on the H200, and what would they cost in parity? Two questions
answered before any compiler work: (1) torch._scaled_mm (cuBLASLt, row-wise scales) against
the bf16 GEMM at the full policy's MLP shapes, (2) the relative L2 error of the eager bf16
policy's actions when chosen linears see fake-quantised FP8 operands (per-token activation
scales, per-output-channel weight scales), against the same policy in plain bf16.
Run from the repository root on the GPU machine: python scripts/device/fp8_probe.py
[--gemms-only]

The GEMMs are timed as the artifact runs them: replays of a CUDA graph that calls each of four
distinct weights once (tuning.gpu_time_ms), per call. Until 2026-12-01 they were timed as single
launches between two CUDA events from Python, which for kernels of 10-40 us measured the launch
more than the GEMM (vision fc1 in bf16 39.6 us there, 15.3 us in the artifact's graph), so the
first results' small shapes (vision MLP, prefix q) did not show what FP8 does to them. The
'fp8+rows' form adds lamp::fp8_rows making the activation's codes from bf16, which a GEMM pays
where no norm before it can make them."""

import argparse
import json
import os
import sys
import time

import torch
import yaml
from torch.nn import functional as F

sys.path.insert(0, os.getcwd())
from bench.gpu_pi05 import reference_model, rel_error, synthetic_inputs  # noqa: E402
from lamp_ros.kernels import ops as kernel_ops  # noqa: E402
from lamp_ros.kernels import tuning  # noqa: E402
from lamp_ros.policies.config import get_preset  # noqa: E402

E4M3_MAX = 448.0


def fake_fp8(t, dim):
    scale = t.float().abs().amax(dim=dim, keepdim=True).clamp(min=1e-12) / E4M3_MAX
    return ((t.float() / scale).to(torch.float8_e4m3fn).float() * scale).to(t.dtype)


def quantised_linear(linear):
    w = fake_fp8(linear.weight.data, 1)

    def forward(x):
        return F.linear(fake_fp8(x, -1), w, linear.bias)
    linear.forward = forward


def gemm_times(out):
    dev = 'cuda'
    shapes = {'prefix gate_up': (968, 2048, 32768), 'prefix down': (968, 16384, 2048),
              'vision fc1': (768, 1152, 4304), 'vision fc2': (768, 4304, 1152),
              'prefix q': (968, 2048, 2048), 'prefix qkv': (968, 2048, 2560),
              'prefix o': (968, 2048, 2048), 'vision qkv': (768, 1152, 3456),
              'vision out': (768, 1152, 1152)}
    res = {}
    for name, (m, k, n) in shapes.items():
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        ws = [torch.randn(n, k, device=dev, dtype=torch.bfloat16) for _ in range(4)]
        a8 = a.to(torch.float8_e4m3fn)
        w8 = [w.to(torch.float8_e4m3fn) for w in ws]
        kn = [w.t().contiguous() for w in ws]  # (in, out), as KNLinear stores a weight
        sa = torch.ones(m, 1, device=dev)
        sb = torch.ones(1, n, device=dev)

        def with_rows(i):
            codes, scale = kernel_ops.fp8_rows(a)
            return torch._scaled_mm(codes, w8[i].t(), scale, sb, out_dtype=torch.bfloat16)
        runs = {'bf16': lambda i: torch.mm(a, ws[i].t()),
                'bf16_kn': lambda i: torch.mm(a, kn[i]),
                'fp8': lambda i: torch._scaled_mm(a8, w8[i].t(), sa, sb,
                                                  out_dtype=torch.bfloat16),
                'fp8_fast': lambda i: torch._scaled_mm(a8, w8[i].t(), sa, sb,
                                                       out_dtype=torch.bfloat16,
                                                       use_fast_accum=True),
                'fp8+rows': with_rows}
        row = {}
        for label, fn in runs.items():
            try:
                ms = tuning.gpu_time_ms(lambda: [fn(i) for i in range(len(ws))]) / len(ws)
                row[label] = {'ms': ms, 'tflops': 2 * m * n * k / ms / 1e9}
            except Exception as exc:
                row[label] = f'{type(exc).__name__}: {exc}'[:300]
        res[name] = row
        print(name, json.dumps(row), flush=True)
    out['gemms'] = res


def parity(out):
    cfg = get_preset('pi05_full')
    with open('config/specs/pi05_full.yaml') as f:
        spec = yaml.safe_load(f)
    model = reference_model(cfg, spec)
    x = synthetic_inputs(cfg)
    with torch.no_grad():
        ref = model.sample_actions(*x).float().clone()
        ref2 = model.sample_actions(*x).float().clone()
    out['bf16_rerun_rel_error'] = rel_error(ref2, ref)
    groups = {
        'prefix_mlp': [m for layer in model.prefix.layers
                       for m in (layer.mlp.gate_proj, layer.mlp.up_proj, layer.mlp.down_proj)],
        'vision_mlp': [m for b in model.vision.modules() if hasattr(b, 'fc1')
                       for m in (b.fc1, b.fc2)],
        'prefix_attn': [m for layer in model.prefix.layers for m in layer.attn.modules()
                        if isinstance(m, torch.nn.Linear)],
        'expert_all': [m for m in model.expert.layers.modules()
                       if isinstance(m, torch.nn.Linear)],
    }
    for g, mods in groups.items():
        print(g, len(mods), 'linears', flush=True)
    results = {}
    applied = []
    for g in ('prefix_mlp', 'vision_mlp', 'prefix_attn', 'expert_all'):
        for m in groups[g]:
            quantised_linear(m)
        applied.append(g)
        with torch.no_grad():
            y = model.sample_actions(*x).float()
        results['+'.join(applied)] = rel_error(y, ref)
        print('fp8', '+'.join(applied), results['+'.join(applied)], flush=True)
    out['parity_rel_l2'] = results


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--gemms-only', action='store_true', help='skip the policy parity part')
    args = ap.parse_args()
    out = {'gpu': torch.cuda.get_device_name(0), 'torch': torch.__version__,
           'timing': 'median GPU time of CUDA-graph replays, 4 distinct weights a replay'}
    t = time.time()
    gemm_times(out)
    if not args.gemms_only:
        parity(out)
    out['seconds'] = time.time() - t
    name = 'fp8_probe_gemms.json' if args.gemms_only else 'fp8_probe.json'
    dest = os.path.join(os.environ.get('OUT', '/tmp'), name)
    with open(dest, 'w') as f:
        json.dump(out, f, indent=1)
    print(json.dumps(out, indent=1))


if __name__ == '__main__':
    main()
