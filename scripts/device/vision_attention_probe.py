"""Which of PyTorch's attention backends runs the vision encoder's attention fastest?

The full policy's SigLIP attention (3 cameras x 16 heads x 256 patches, head dim 72, no mask,
q/k/v as strided views of one (b, n, heads, d) projection) runs as
`scaled_dot_product_attention`, which picks cuDNN on the H200: 8.4 us a layer in the kernel table
of the 13.30 ms run, 27 layers an inference, for about 1 us of arithmetic. This times every
backend PyTorch has for it as the build times tiles (one CUDA-graph launch over `--layers`
distinct q/k/v) and checks each against the math backend in float32.

Beside them, `single_pass` (2026-12-03): one Triton program per (image, head, block of queries)
that holds all 256 keys at once, so the softmax needs no running max and no rescaling (the
whole row of scores is in registers), head dim 72 padded to 128 in registers only, q/k/v read
from the strided projection as the encoder leaves them and the output written as (b, n,
heads * d), the o projection's input, with no transpose. Tilings by `--blocks`.

    python3 scripts/device/vision_attention_probe.py [--out FILE.json] [--layers 8]
"""

import argparse
import os
import sys

import torch
import triton
import triton.language as tl
from torch.nn import functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.getcwd())
from bench.probes import save_report  # noqa: E402
from lamp_ros.kernels import tuning  # noqa: E402

BACKENDS = {'cudnn': SDPBackend.CUDNN_ATTENTION, 'flash': SDPBackend.FLASH_ATTENTION,
            'efficient': SDPBackend.EFFICIENT_ATTENTION, 'math': SDPBackend.MATH}


@triton.jit
def _single_pass_kernel(qkv_ptr, out_ptr, n, heads, stride_b, stride_n, stride_part, stride_h,
                        qk_scale, D: tl.constexpr, DP: tl.constexpr, BM: tl.constexpr,
                        KEYS: tl.constexpr):
    bh = tl.program_id(0)
    b, h = bh // heads, bh % heads
    rows = tl.program_id(1) * BM + tl.arange(0, BM)
    keys = tl.arange(0, KEYS)
    d = tl.arange(0, DP)
    d_ok = d < D
    base = qkv_ptr + b * stride_b + h * stride_h + d[None, :]
    q = tl.load(base + rows[:, None] * stride_n, mask=(rows < n)[:, None] & d_ok[None, :],
                other=0.0)
    kv_ok = (keys < n)[:, None] & d_ok[None, :]
    k = tl.load(base + stride_part + keys[:, None] * stride_n, mask=kv_ok, other=0.0)
    v = tl.load(base + 2 * stride_part + keys[:, None] * stride_n, mask=kv_ok, other=0.0)
    s = tl.dot(q, tl.trans(k)) * qk_scale  # log2 units
    s = tl.where((keys < n)[None, :], s, float('-inf'))
    p = tl.exp2(s - tl.max(s, axis=1)[:, None])
    o = tl.dot(p.to(v.dtype), v) / tl.sum(p, axis=1)[:, None]
    out_at = out_ptr + (b * n + rows)[:, None] * heads * D + h * D + d[None, :]
    tl.store(out_at, o.to(out_ptr.dtype.element_ty), mask=(rows < n)[:, None] & d_ok[None, :])


def single_pass(qkv: torch.Tensor, heads: int, block_m: int, warps: int) -> torch.Tensor:
    """Attention of a (b, n, 3, heads, d) projection (q, k, v along dim 2) -> (b, n, heads * d),
    every key of a row in one program (n <= 256)."""
    b, n, parts, h, d = qkv.shape
    if parts != 3 or h != heads or n > 256 or qkv.stride(4) != 1:
        raise ValueError(f'single_pass: {tuple(qkv.shape)} is not q/k/v of {heads} heads')
    out = torch.empty((b, n, heads * d), dtype=qkv.dtype, device=qkv.device)
    grid = (b * heads, triton.cdiv(n, block_m))
    _single_pass_kernel[grid](qkv, out, n, heads, qkv.stride(0), qkv.stride(1), qkv.stride(2),
                              qkv.stride(3), d ** -0.5 * 1.4426950408889634, D=d,
                              DP=triton.next_power_of_2(d), BM=block_m,
                              KEYS=triton.next_power_of_2(n), num_warps=warps)
    return out


def projections(layers, b=3, n=256, heads=16, d=72):
    """The (b, n, 3, heads, d) q/k/v projection of each layer, as the encoder's GEMM leaves it."""
    g = torch.Generator(device='cuda').manual_seed(0)
    return [torch.randn(b, n, 3, heads, d, device='cuda', generator=g).to(torch.bfloat16)
            for _ in range(layers)]


def operands(layers, b=3, n=256, heads=16, d=72):
    """q, k, v per layer as the encoder makes them: views of a (b, n, 3, heads, d) projection."""
    return [tuple(p[:, :, i].transpose(1, 2) for i in range(3))
            for p in projections(layers, b, n, heads, d)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--out', default='vision_attention_probe.json')
    parser.add_argument('--layers', type=int, default=8)
    parser.add_argument('--blocks', default='32x4,64x4,64x8,128x8',
                        help='single_pass tilings: queries per program x warps')
    args = parser.parse_args()
    qkv = operands(args.layers)
    q, k, v = (t.float() for t in qkv[0])
    want = F.scaled_dot_product_attention(q, k, v)
    report = {'gpu': torch.cuda.get_device_name(), 'torch': torch.__version__,
              'layers': args.layers, 'backends': {}}
    with torch.no_grad():
        default_us = tuning.gpu_time_ms(
            lambda: [F.scaled_dot_product_attention(*t) for t in qkv]) * 1e3 / args.layers
        report['default_us'] = round(default_us, 2)
        for name, backend in BACKENDS.items():
            try:
                with sdpa_kernel(backend):
                    got = F.scaled_dot_product_attention(*qkv[0])
                    us = tuning.gpu_time_ms(
                        lambda: [F.scaled_dot_product_attention(*t) for t in qkv])
                report['backends'][name] = {'us': round(us * 1e3 / args.layers, 2),
                                            'rel_err': tuning.disagreement(got, want)}
            except RuntimeError as e:
                report['backends'][name] = {'error': str(e).splitlines()[0]}
            print(name, report['backends'][name], flush=True)
        packed = projections(args.layers)  # the same values as qkv's views
        want_out = want.transpose(1, 2).reshape(3, 256, -1)
        for tiling in args.blocks.split(','):
            bm, warps = (int(v) for v in tiling.split('x'))
            name = f'single_pass {bm}x{warps}'
            try:
                got = single_pass(packed[0], 16, bm, warps)
                us = tuning.gpu_time_ms(lambda: [single_pass(p, 16, bm, warps) for p in packed])
                report['backends'][name] = {'us': round(us * 1e3 / args.layers, 2),
                                            'rel_err': tuning.disagreement(got, want_out)}
            except Exception as e:  # a tiling that does not fit is a result, not a crash
                report['backends'][name] = {'error': f'{type(e).__name__}: {e}'[:300]}
            print(name, report['backends'][name], flush=True)
    print('default (what the artifact gets):', report['default_us'], 'us', flush=True)
    save_report(report, args.out)


if __name__ == '__main__':
    main()
