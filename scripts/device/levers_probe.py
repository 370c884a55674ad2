"""Which of the remaining small levers of pi05_full pay on the H200? Measured side by side, each
against what the artifact runs today, at the full policy's shapes, before any compiler work:

  expert attention   `_mqa_kernel` rotating q and the own k in every program (today) against
                     rotating them once in `_rope_qk_kernel` first (tiles' seventh value), with
                     tilings the spill-free kernel may now afford; timed as the build tunes it
                     (18 layers, each on its own prefix K/V), registers and spills listed
  prefix attention   two GEMMs around lamp::masked_softmax (today) against
                     scaled_dot_product_attention with the finite-fill bias, per backend
  vision fc1 + gelu  cuBLAS GEMM + bias then a GELU kernel (today) against cuBLASLt's
                     GELU_BIAS epilogue (torch._addmm_activation)
  FP8 accumulation   torch._scaled_mm of the prefix MLP shapes with and without
                     use_fast_accum: time and error against float32 sums of the same codes

    python3 scripts/device/levers_probe.py [--out FILE.json]
"""

import argparse
import json
import os
import sys

import torch
from torch.nn import functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.getcwd())
from lamp_ros.kernels import ops, triton_expert as te, tuning  # noqa: E402

ROWS, HEADS, D, PREFIX, LAYERS = 50, 8, 256, 968, 18
TODAY = [16, 64, 128, 4, 1]
ROTATED = [[16, 64, 128, 4, 1, 0, 1], [16, 64, 256, 4, 1, 0, 1], [32, 64, 128, 4, 1, 0, 1],
           [32, 64, 256, 4, 1, 0, 1], [16, 64, 128, 4, 2, 0, 1], [16, 32, 128, 4, 2, 0, 1],
           [64, 64, 128, 8, 1, 0, 1], [64, 64, 256, 8, 1, 0, 1], [32, 64, 128, 8, 1, 0, 1],
           [16, 128, 256, 4, 1, 0, 1]]


def rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


def spills(fn):
    out = []
    for cache in fn.device_caches.values():
        for kernel in cache[0].values():
            out.append({'regs': kernel.n_regs, 'spills': kernel.n_spills,
                        'warps': kernel.metadata.num_warps})
    return out


def expert_attention():
    dev, bf = 'cuda', torch.bfloat16
    qkv = torch.randn(1, ROWS, (HEADS + 2) * D, dtype=bf, device=dev)
    kv = [torch.randn(2, 1, PREFIX, 1, D, dtype=bf, device=dev) for _ in range(LAYERS)]
    pos = torch.arange(PREFIX, PREFIX + ROWS, device=dev)[None]
    freq = 10000.0 ** (-torch.arange(D // 2, device=dev, dtype=torch.float32) / (D // 2))
    angle = pos.float()[..., None] * freq
    cos, sin = angle.cos(), angle.sin()
    mask = torch.ones(1, ROWS, PREFIX + ROWS, dtype=torch.bool, device=dev)
    mask[..., 900:PREFIX] = False  # some padding in the prompt
    args = lambda i: (qkv, *kv[i], cos, sin, mask, HEADS, D ** -0.5)  # noqa: E731
    want = ops.mqa_attention_reference(*args(0))
    base = te.mqa_attention(*args(0), TODAY)
    out = {}
    for tiles in [TODAY, *ROTATED]:
        try:
            got = te.mqa_attention(*args(0), tiles)
            us = tuning.gpu_time_ms(lambda: [te.mqa_attention(*args(i), tiles)
                                             for i in range(LAYERS)]) / LAYERS * 1e3
            out[str(tiles)] = {'us': round(us, 2), 'rel_error': rel(got, want),
                               'bit_identical_to_today': bool(torch.equal(got, base))}
        except Exception as exc:
            out[str(tiles)] = f'rejected: {type(exc).__name__}: {str(exc)[-200:]}'
        print('expert attention', tiles, out[str(tiles)], flush=True)
    out['resources'] = {'_mqa_kernel': spills(te._mqa_kernel),
                        '_rope_qk_kernel': spills(te._rope_qk_kernel)}
    return out


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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--out', default='levers_probe.json')
    args = parser.parse_args()
    torch.manual_seed(0)
    report = {'gpu': torch.cuda.get_device_name(), 'torch': torch.__version__}
    for name, fn in (('expert_attention', expert_attention),
                     ('prefix_attention', prefix_attention), ('vision_fc1_gelu', vision_gelu),
                     ('fp8_accumulation', fp8_accumulation)):
        try:
            report[name] = fn()
        except Exception as exc:
            report[name] = f'failed: {type(exc).__name__}: {exc}'
            print(name, report[name], flush=True)
        with open(args.out, 'w', encoding='utf-8') as f:
            json.dump(report, f, indent=1)


if __name__ == '__main__':
    main()
