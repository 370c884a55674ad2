"""Which of the remaining small levers of pi05_full pay on the H200? Measured side by side, each
against what the artifact runs today, at the full policy's shapes, before any compiler work:

  expert attention   (measured at commit 828de0b, whose _rope_qk_kernel rotated q and the
                     tokens' own k once before `_mqa_kernel` instead of in every program:
                     254 registers and no spills instead of 255 and 58, yet 14.2 us per call
                     against 13.3, and no other tiling won; the form was reverted, and
                     bench/results/levers_probe_h200.json keeps those figures)
  prefix attention   two GEMMs around lamp::masked_softmax (today) against
                     scaled_dot_product_attention with the finite-fill bias, per backend
  vision fc1 + gelu  cuBLAS GEMM + bias then a GELU kernel (today) against cuBLASLt's
                     GELU_BIAS epilogue (torch._addmm_activation)
  FP8 accumulation   torch._scaled_mm of the prefix MLP shapes with and without
                     use_fast_accum: time and error against float32 sums of the same codes

    python3 scripts/device/levers_probe.py [--out FILE.json]

Measured on the H200 (2026-12-01, bench/results/levers_probe_h200.json): the prefix attention's
SDPA forms took 67-80 us against 34 (kept); the GELU epilogue 15.7 us against 18.7 per vision
fc1 (taken: the lowering's gelu_epilogue); fast accumulation gate/up 134 -> 111 us with the
GEMM's relative error 1.7e-3 -> 1.9e-3 (taken: the fp8_fast_accumulation pass), down 57 -> 55 us
with it doubled (left exact).
"""

import os
import sys

import torch
from torch.nn import functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.getcwd())
from bench.gpu_pi05 import rel_error as rel  # noqa: E402
from bench.probes import run_sections  # noqa: E402
from lamp_ros.kernels import ops, tuning  # noqa: E402

HEADS, D, PREFIX = 8, 256, 968


def prefix_attention():
    dev, bf = 'cuda', torch.bfloat16
    n, b = PREFIX, 1
    q = torch.randn(b, n, HEADS, D, dtype=bf, device=dev)
    k, v = torch.randn(2, b, n, 1, D, dtype=bf, device=dev)
    mask = torch.ones(b, n, n, dtype=torch.bool, device=dev)
    mask[:, :, 900:] = False  # padded prompt tokens: nobody sees them
    mask[:, 900:, :] = False  # and their own rows are fully masked (uniform, as eager)
    scale = D ** -0.5

    def today():
        scores = torch.matmul(q.reshape(b, n * HEADS, D), k.reshape(b, n, D).transpose(1, 2))
        probs = ops.masked_softmax(scores, mask, HEADS, scale)
        return torch.matmul(probs, v.reshape(b, n, D)).reshape(b, n, HEADS * D)

    want = ops.mqa_flash_reference(q, k, v, mask, HEADS, scale)
    bias = torch.zeros(mask.shape, dtype=bf, device=dev).masked_fill(~mask, torch.finfo(bf).min)
    forms = {'today (GEMMs + masked_softmax)': (today, None)}

    def sdpa(expand):
        def run():
            if expand:  # heads as SDPA heads, the one K/V head broadcast (stride 0)
                kh = k.transpose(1, 2).expand(b, HEADS, n, D)
                vh = v.transpose(1, 2).expand(b, HEADS, n, D)
                o = F.scaled_dot_product_attention(q.transpose(1, 2), kh, vh,
                                                   attn_mask=bias[:, None])
                return o.transpose(1, 2).reshape(b, n, HEADS * D)
            o = F.scaled_dot_product_attention(q.reshape(b, 1, n * HEADS, D),
                                               k.transpose(1, 2), v.transpose(1, 2),
                                               attn_mask=folded)
            return o.reshape(b, n, HEADS * D)
        return run

    folded = bias.repeat_interleave(HEADS, dim=1)[:, None]
    for name, backend in (('cudnn', SDPBackend.CUDNN_ATTENTION),
                          ('efficient', SDPBackend.EFFICIENT_ATTENTION)):
        for expand in (True, False):
            forms[f'sdpa {name} {"heads" if expand else "folded"}'] = (sdpa(expand), backend)
    out = {}
    for name, (fn, backend) in forms.items():
        try:
            if backend is None:
                got = fn()
                us = tuning.gpu_time_ms(fn) * 1e3
            else:
                with sdpa_kernel([backend]):
                    got = fn()
                    us = tuning.gpu_time_ms(fn) * 1e3
            out[name] = {'us': round(us, 2), 'rel_error': rel(got, want),
                         'finite': bool(torch.isfinite(got).all())}
        except Exception as exc:
            out[name] = f'rejected: {type(exc).__name__}: {str(exc)[-200:]}'
        print('prefix attention', name, out[name], flush=True)
    return out


def vision_gelu():
    dev, bf = 'cuda', torch.bfloat16
    x = torch.randn(768, 1152, dtype=bf, device=dev)
    ws = [torch.randn(4304, 1152, dtype=bf, device=dev) / 34 for _ in range(27)]
    bs = [torch.randn(4304, dtype=bf, device=dev) / 10 for _ in range(27)]
    want = F.gelu(F.linear(x.float(), ws[0].float(), bs[0].float()), approximate='tanh')
    forms = {'today (linear + gelu)':
             lambda i: F.gelu(F.linear(x, ws[i], bs[i]), approximate='tanh'),
             'cublasLt GELU_BIAS epilogue':
             lambda i: torch._addmm_activation(bs[i], x, ws[i].t(), use_gelu=True)}
    out = {}
    for name, fn in forms.items():
        got = fn(0)
        us = tuning.gpu_time_ms(lambda: [fn(i) for i in range(27)]) / 27 * 1e3
        out[name] = {'us': round(us, 2), 'rel_error': rel(got, want)}
        print('vision fc1', name, out[name], flush=True)
    return out


def fp8_accumulation():
    dev = 'cuda'
    out = {}
    for name, (m, k, n) in {'prefix gate_up': (968, 2048, 32768),
                            'prefix down': (968, 16384, 2048)}.items():
        a = torch.randn(m, k, device=dev)
        w = torch.randn(n, k, device=dev)
        a8, sa = ops.fp8_rows_reference(a)
        w8, sw = ops.fp8_rows_reference(w)
        a8, w8 = a8.to(torch.float8_e4m3fn), w8.to(torch.float8_e4m3fn)
        want = (a8.float() * sa) @ (w8.float() * sw).t()
        row = {}
        for fast in (False, True):
            fn = lambda: torch._scaled_mm(a8, w8.t(), sa, sw.t(),  # noqa: E731
                                          out_dtype=torch.bfloat16, use_fast_accum=fast)
            got = fn()
            row['fast' if fast else 'float32 promotion'] = {
                'us': round(tuning.gpu_time_ms(fn) * 1e3, 2), 'rel_error': rel(got, want),
                'max_abs_over_rms': float((got.float() - want).abs().max()
                                          / want.pow(2).mean().sqrt())}
        out[name] = row
        print('fp8', name, row, flush=True)
    return out


def main():
    run_sections(__doc__.splitlines()[0], 'levers_probe.json',
                 (('prefix_attention', prefix_attention), ('vision_fc1_gelu', vision_gelu),
                  ('fp8_accumulation', fp8_accumulation)))


if __name__ == '__main__':
    main()
