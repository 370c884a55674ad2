"""The `lamp::` kernels on the GPU: match their reference at the policy's shapes, and time them
against the eager op chains they replace (CUDA events, median of 200 calls).

Usage: python3 scripts/device/kernels_check.py   (prints one line per kernel and shape)
"""

import torch
import triton.testing

from lamp_ros.kernels import ops, triton_kernels


def check(name, fast, reference, args, atol):
    got, want = fast(*args), reference(*args)
    err = float((got.float() - want.float()).abs().max())
    t_fast = triton.testing.do_bench(lambda: fast(*args), rep=50, return_mode='median')
    t_ref = triton.testing.do_bench(lambda: reference(*args), rep=50, return_mode='median')
    status = 'ok' if err <= atol else 'MISMATCH'
    print(f'{name:34s} max abs err {err:.3g} ({status}); kernel {t_fast * 1e3:7.1f} us, '
          f'eager chain {t_ref * 1e3:7.1f} us, x{t_ref / t_fast:5.1f}', flush=True)
    return err <= atol


def main() -> None:
    torch.manual_seed(0)
    bf16, dev = torch.bfloat16, 'cuda'
    ok = True
    for rows, width in ((968, 2048), (50, 1024)):
        x = torch.randn(1, rows, width, dtype=bf16, device=dev)
        s, b = (torch.randn(width, dtype=bf16, device=dev) * 0.1 for _ in range(2))
        ok &= check(f'rms_norm {rows}x{width}', triton_kernels.rms_norm, ops.rms_norm_reference,
                    (x, None, None, 1e-6), 0.07)
        ok &= check(f'ada_rms_norm {rows}x{width}', triton_kernels.rms_norm,
                    ops.rms_norm_reference, (x, s, b, 1e-6), 0.07)
    for n, heads, width in ((968, 8, 2560), (50, 8, 2560)):
        qkv = torch.randn(1, n, width, dtype=bf16, device=dev)
        q = qkv[..., :heads * 256].reshape(1, n, heads, 256)
        pos = torch.arange(n, device=dev)[None]
        freq = 10000.0 ** (-torch.arange(128, device=dev, dtype=torch.float32) / 128)
        angle = pos.float()[..., None] * freq
        ok &= check(f'rope {n}x{heads}x256', triton_kernels.rope, ops.rope_reference,
                    (q, angle.cos(), angle.sin()), 0.07)
    for n, m in ((968, 16384), (50, 4096)):
        gate, up = torch.randn(1, n, 2 * m, dtype=bf16, device=dev).split(m, -1)
        ok &= check(f'geglu {n}x{m}', triton_kernels.geglu, ops.geglu_reference, (gate, up), 0.3)
    for n, m in ((968, 968), (50, 1018)):  # prefix and expert attention, 8 heads as rows
        scores = torch.randn(1, n * 8, m, dtype=bf16, device=dev) * 8
        mask = torch.rand(1, n, m, device=dev) > 0.1
        ok &= check(f'masked_softmax {n}x8x{m}', triton_kernels.masked_softmax,
                    ops.masked_softmax_reference, (scores, mask, 8, 1 / 16), 0.01)
    print('all kernels match' if ok else 'SOME KERNELS DO NOT MATCH')
    raise SystemExit(0 if ok else 1)


if __name__ == '__main__':
    main()
