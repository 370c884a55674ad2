"""Does cuBLAS run the vision's and the prefix's bf16 GEMMs faster with the weight stored
transposed? Measured side by side at the full policy's shapes, before any compiler work.

cuBLAS picks its kernel by problem and layout. The artifact stores every weight as nn.Linear
does, (N, K), so each GEMM is x @ W^T with W read transposed ("TN"); a weight stored (K, N)
contiguous makes the same product a plain "NN" GEMM, and at 50 rows (the expert's o, see
gemm_orientation_probe.py) cuBLAS ran that one 1.5 us faster. The compiler can store a weight
either way at no cost at run time, so if a layout wins here, the build can measure and pick it
per GEMM as it picks the expert's tiles.

  linear   today: F.linear(x, W, b) / torch.addmm(r, x, W.t()) with the residual /
           torch._addmm_activation(b, x, W.t(), use_gelu=True) for fc1
  kn       the same ops on Wt = W.t().contiguous(), a (K, N) weight

Every form runs each GEMM once per layer on that layer's own weights (27 vision blocks, 17 prefix
layers) in one timed CUDA-graph launch, so the weights come from HBM as in the inference.

    python3 scripts/device/gemm_layout_probe.py [--out FILE.json] [--prefix-rows 832,896,968]

--prefix-rows times only the prefix's two chosen GEMMs (q/k/v, and o without its residual, which
the MLP's norm kernel adds since) at each of those row counts: the rows a group built with
fusion.text_lengths [64, 128] runs for prompts of 64, 128 and 200 tokens (768 image rows plus
the text). cuBLAS picks its kernel per shape, so the layout the build chose at 968 rows need
not be the faster one at 832.

Measured on the H200 (2026-12-01, bench/results/h200_weight_layouts/gemm_layout_probe_h200.json),
us per call, (out, in) as today against (in, out): vision qkv 12.52 / 13.85, out_proj 7.04 /
6.74, fc1 15.45 / 16.35, fc2 20.16 / 15.87; prefix qkv 17.75 / 17.70, o 16.31 / 16.26; outputs
equal. So the layout is worth choosing per GEMM (fc2: 0.12 ms an inference), and the lowering
does (kernels/lowering.py: choose_weight_layouts). The vision's SDPA: cuDNN 9.4 us (the
default), FlashAttention 11.1, memory-efficient 16.4.
"""

import argparse
import json
import os
import sys

import torch
from torch.nn import functional as F

sys.path.insert(0, os.getcwd())
from lamp_ros.kernels import tuning  # noqa: E402

DEV, BF = 'cuda', torch.bfloat16
# name: (rows, K, N, layers, epilogue)
SHAPES = {
    'vision qkv': (768, 1152, 3456, 27, 'bias'),
    'vision out_proj': (768, 1152, 1152, 27, 'bias'),
    'vision fc1': (768, 1152, 4304, 27, 'gelu'),
    'vision fc2': (768, 4304, 1152, 27, 'bias'),
    'prefix qkv': (968, 2048, 2560, 17, 'none'),
    'prefix o': (968, 2048, 2048, 17, 'residual'),
}


def gemm(x, w, b, r, epilogue, kn):
    wt = w if kn else w.t()  # (K, N) either way; contiguous only when stored transposed
    if epilogue == 'bias':
        return torch.addmm(b, x, wt)
    if epilogue == 'gelu':
        return torch._addmm_activation(b, x, wt, use_gelu=True)
    if epilogue == 'residual':
        return torch.addmm(r, x, wt)
    return torch.mm(x, wt)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--out', default='gemm_layout_probe.json')
    parser.add_argument('--prefix-rows', default='',
                        help='comma-separated row counts: the prefix GEMMs alone at each')
    args = parser.parse_args()
    torch.manual_seed(0)
    report = {'gpu': torch.cuda.get_device_name(), 'torch': torch.__version__, 'us_per_call': {}}
    shapes = SHAPES
    if args.prefix_rows:
        shapes = {f'prefix {what} {rows}': (rows, 2048, n, 17, 'none')
                  for rows in map(int, args.prefix_rows.split(','))
                  for what, n in (('qkv', 2560), ('o', 2048))}
    for name, (rows, k, n, layers, epilogue) in shapes.items():
        x = torch.randn(rows, k, dtype=BF, device=DEV)
        r = torch.randn(rows, n, dtype=BF, device=DEV)
        ws = [(torch.randn(n, k, device=DEV) / k ** 0.5).to(BF) for _ in range(layers)]
        bs = [torch.randn(n, dtype=BF, device=DEV) / 10 for _ in range(layers)]
        kns = [w.t().contiguous() for w in ws]
        want = gemm(x, ws[0], bs[0], r, epilogue, False).float()
        got = gemm(x, kns[0], bs[0], r, epilogue, True).float()
        err = float((got - want).abs().max() / want.abs().max())
        times = {}
        for form, weights in (('linear', ws), ('kn', kns), ('linear again', ws)):
            kn = form == 'kn'
            ms = tuning.gpu_time_ms(lambda: [gemm(x, w, b, r, epilogue, kn)
                                             for w, b in zip(weights, bs)])
            times[form] = round(ms * 1e3 / layers, 2)
        flop = 2 * rows * k * n
        best = min(times, key=times.get)
        report['us_per_call'][name] = dict(times, rel_diff_kn=err,
                                           tflops_linear=round(flop / times['linear'] / 1e6))
        print(f'{name:16s} {rows}x{k}->{n} ({epilogue:8s}): linear {times["linear"]:6.2f} us '
              f'(again {times["linear again"]:6.2f}), weight stored (K, N) {times["kn"]:6.2f} us; '
              f'best {best}; outputs differ by {err:.1g} of max', flush=True)
    if args.prefix_rows:
        with open(args.out, 'w') as f:
            json.dump(report, f, indent=1)
        return
    # the vision's attention: which SDPA backend at its shape (3 images x 16 heads x 256 x 72)
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q, k_, v = (torch.randn(3, 16, 256, 72, dtype=BF, device=DEV) for _ in range(3))
    want = F.scaled_dot_product_attention(q.float(), k_.float(), v.float())
    sdpa = {}
    for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION,
                    SDPBackend.EFFICIENT_ATTENTION):
        try:
            with sdpa_kernel(backend):
                got = F.scaled_dot_product_attention(q, k_, v)
                ms = tuning.gpu_time_ms(lambda: F.scaled_dot_product_attention(q, k_, v))
            sdpa[backend.name] = {'us': round(ms * 1e3, 2),
                                  'max_abs_err': float((got.float() - want).abs().max())}
        except RuntimeError as e:
            sdpa[backend.name] = {'error': str(e).splitlines()[0]}
    ms = tuning.gpu_time_ms(lambda: F.scaled_dot_product_attention(q, k_, v))
    sdpa['default'] = {'us': round(ms * 1e3, 2)}
    report['vision_sdpa'] = sdpa
    print('vision SDPA 3x16x256x72:', json.dumps(sdpa), flush=True)
    with open(args.out, 'w') as f:
        json.dump(report, f, indent=1)


if __name__ == '__main__':
    main()
