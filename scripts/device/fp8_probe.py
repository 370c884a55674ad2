"""Would FP8 (e4m3) GEMMs pay on the H200, and what would they cost in parity? Two questions
answered before any compiler work: (1) torch._scaled_mm (cuBLASLt, row-wise scales) against
the bf16 GEMM at the full policy's MLP shapes, (2) the relative L2 error of the eager bf16
policy's actions when chosen linears see fake-quantised FP8 operands (per-token activation
scales, per-output-channel weight scales), against the same policy in plain bf16.
Run from the repository root on the GPU machine: python scripts/device/fp8_probe.py"""

import json
import os
import sys
import time

import torch
import yaml
from torch.nn import functional as F

sys.path.insert(0, os.getcwd())
from bench.gpu_pi05 import reference_model, rel_error, synthetic_inputs  # noqa: E402
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
              'prefix q': (968, 2048, 2048)}
    res = {}
    for name, (m, k, n) in shapes.items():
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        ws = [torch.randn(n, k, device=dev, dtype=torch.bfloat16) for _ in range(4)]
        a8 = a.to(torch.float8_e4m3fn)
        w8 = [w.to(torch.float8_e4m3fn) for w in ws]
        sa = torch.ones(m, 1, device=dev)
        sb = torch.ones(1, n, device=dev)
        runs = {'bf16': lambda i: torch.mm(a, ws[i].t()),
                'fp8': lambda i: torch._scaled_mm(a8, w8[i].t(), sa, sb,
                                                  out_dtype=torch.bfloat16),
                'fp8_fast': lambda i: torch._scaled_mm(a8, w8[i].t(), sa, sb,
                                                       out_dtype=torch.bfloat16,
                                                       use_fast_accum=True)}
        row = {}
        for label, fn in runs.items():
            try:
                for i in range(8):
                    fn(i % 4)
                torch.cuda.synchronize()
                times = []
                for rep in range(40):
                    s, e = torch.cuda.Event(True), torch.cuda.Event(True)
                    s.record()
                    fn(rep % 4)
                    e.record()
                    e.synchronize()
                    times.append(s.elapsed_time(e))
                times.sort()
                ms = times[len(times) // 2]
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
    out = {'gpu': torch.cuda.get_device_name(0), 'torch': torch.__version__}
    t = time.time()
    gemm_times(out)
    parity(out)
    out['seconds'] = time.time() - t
    dest = os.path.join(os.environ.get('OUT', '/tmp'), 'fp8_probe.json')
    with open(dest, 'w') as f:
        json.dump(out, f, indent=1)
    print(json.dumps(out, indent=1))


if __name__ == '__main__':
    main()
