"""Which of PyTorch's attention backends runs the vision encoder's attention fastest?

The full policy's SigLIP attention (3 cameras x 16 heads x 256 patches, head dim 72, no mask,
q/k/v as strided views of one (b, n, heads, d) projection) runs as
`scaled_dot_product_attention`, which picks cuDNN on the H200: 8.4 us a layer in the kernel table
of the 13.30 ms run, 27 layers an inference, for about 1 us of arithmetic. This times every
backend PyTorch has for it as the build times tiles (one CUDA-graph launch over `--layers`
distinct q/k/v) and checks each against the math backend in float32.

    python3 scripts/device/vision_attention_probe.py [--out FILE.json] [--layers 8]
"""

import argparse
import os
import sys

import torch
from torch.nn import functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.getcwd())
from bench.probes import save_report  # noqa: E402
from lamp_ros.kernels import tuning  # noqa: E402

BACKENDS = {'cudnn': SDPBackend.CUDNN_ATTENTION, 'flash': SDPBackend.FLASH_ATTENTION,
            'efficient': SDPBackend.EFFICIENT_ATTENTION, 'math': SDPBackend.MATH}


def operands(layers, b=3, n=256, heads=16, d=72):
    """q, k, v per layer as the encoder makes them: views of a (b, n, 3, heads, d) projection."""
    g = torch.Generator(device='cuda').manual_seed(0)
    out = []
    for _ in range(layers):
        p = torch.randn(b, n, 3, heads, d, device='cuda', generator=g).to(torch.bfloat16)
        out.append(tuple(p[:, :, i].transpose(1, 2) for i in range(3)))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--out', default='vision_attention_probe.json')
    parser.add_argument('--layers', type=int, default=8)
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
    print('default (what the artifact gets):', report['default_us'], 'us', flush=True)
    save_report(report, args.out)


if __name__ == '__main__':
    main()
