"""The `lamp::` kernels on the GPU: match their reference at the policy's shapes, and time them
against the eager op chains they replace (GPU time of CUDA-graph replays, as the artifact runs).
five-kernel layer (triton_expert.py) is tuned here as the lowering tunes it, every candidate's
time printed, and checked in bf16 with the chosen tiles.

Usage: python3 scripts/device/kernels_check.py   (prints one line per kernel and shape)
"""

import torch
from lamp_ros.kernels import ops, triton_kernels, tuning


def check(name, fast, reference, args, atol):
    got, want = fast(*args), reference(*args)
    err = float((got.float() - want.float()).abs().max())
    t_fast = tuning.gpu_time_ms(lambda: fast(*args))
    t_ref = tuning.gpu_time_ms(lambda: reference(*args))
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
    ok &= check_expert_layer()
    print('all kernels match' if ok else 'SOME KERNELS DO NOT MATCH')
    raise SystemExit(0 if ok else 1)


def check_expert_layer(rows=50, width=1024, heads=8, d=256, mlp=4096, prefix=968) -> bool:
    """pi05_full's expert layer: tune, check against the float32 reference, sum the times."""
    torch.manual_seed(0)
    bf16, dev = torch.bfloat16, 'cuda'

    def weight(n, k):
        return (torch.randn(n, k, device=dev) / k ** 0.5).to(bf16)

    x = torch.randn(1, rows, width, dtype=bf16, device=dev)
    w_qkv, w_o = weight((heads + 2) * d, width), weight(width, heads * d)
    w_gate, w_up, w_down = weight(mlp, width), weight(mlp, width), weight(width, mlp)
    mod = 1 + torch.randn(width, device=dev) / 10
    gate = (torch.randn(width, device=dev) / 10).to(bf16)
    b_qkv, b_gate, b_up = (torch.randn(n, device=dev) / 10 for n in ((heads + 2) * d, mlp, mlp))
    qkv = torch.randn(1, rows, (heads + 2) * d, dtype=bf16, device=dev)
    k_prefix, v_prefix = torch.randn(2, 1, prefix, 1, d, dtype=bf16, device=dev)
    angle = torch.randn(1, rows, d // 2, device=dev)
    mask = torch.rand(1, rows, prefix + rows, device=dev) > 0.1
    a = torch.randn(1, rows, heads * d, dtype=bf16, device=dev)
    h = torch.randn(1, rows, mlp, dtype=bf16, device=dev)
    counters = torch.zeros(1024, dtype=torch.int32, device=dev)
    cases = {
        'qkv': (ops.ada_linear, (x, w_qkv, mod, b_qkv, 1e-6), ops.ada_linear_reference,
                tuning.gemm_candidates(rows, (heads + 2) * d, width)),
        'attention': (ops.mqa_attention, (qkv, k_prefix, v_prefix, angle.cos(), angle.sin(),
                                          mask, heads, d ** -0.5),
                      ops.mqa_attention_reference, tuning.attention_candidates(d)),
        'o': (ops.gated_linear, (a, w_o, x, gate), ops.gated_linear_reference,
              tuning.gemm_candidates(rows, width, heads * d)),
        'gate_up': (ops.ada_geglu, (x, w_gate, w_up, mod, b_gate, b_up, 1e-6),
                    ops.ada_geglu_reference, tuning.gemm_candidates(rows, mlp, width)),
        'down': (ops.gated_linear, (h, w_down, x, gate), ops.gated_linear_reference,
                 tuning.gemm_candidates(rows, width, mlp)),
    }
    ok, total = True, 0.0
    for role, (op, args, reference, candidates) in cases.items():
        extra = () if role == 'attention' else (counters,)
        choice = tuning.pick(candidates, lambda t: op(*args, t, *extra), on_gpu=True)
        times = [f'{k} {v if isinstance(v, str) else f"{v * 1e3:.1f}"}'
                 for k, v in choice.timings.items()]
        print(f'expert {role}: ' + ', '.join(times))
        best = min(v for v in choice.timings.values() if isinstance(v, float))
        total += best
        want = reference(*args).float()
        worst = 0.0  # every tiling that ran, split-K ones twice (their counters must reset)
        for tiles in candidates:
            if isinstance(choice.timings.get(str(tiles)), float):
                for _ in range(2):
                    got = op(*args, tiles, *extra).float()
                    worst = max(worst, float((got - want).abs().max() / want.abs().max()))
        leftover = int(counters.abs().sum())
        status = 'ok' if worst <= 2e-2 and not leftover else 'MISMATCH'
        print(f'expert {role:9s} tiles {choice.tiles}: {best * 1e3:6.1f} us; worst error of '
              f'any tiling {worst:.2g} of max |ref|; counters left {leftover} ({status})',
              flush=True)
        ok &= status == 'ok'
    print(f'expert layer, five kernels: {total * 1e3:.1f} us; x 180 layer-steps = '
          f'{total * 180:.2f} ms', flush=True)
    return ok


if __name__ == '__main__':
    main()
