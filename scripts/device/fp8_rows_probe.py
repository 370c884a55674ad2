"""How fast can the prefix MLP's FP8 rows be made? `lamp::geglu_fp8` (gelu_tanh(gate) * up of
a 968 x 16384 row block, quantised to e4m3 rows for the down GEMM) takes ~25 us of each prefix
layer, 17 layers an inference: it reads 63 MB (gate and up in bf16) and writes 16 MB of codes,
3.1 TB/s, where a plain device copy on the H200 moves ~4 TB/s. One row per program holds the
whole row in registers, so the launch's warps per program decide how many rows are in flight
per SM; and the loads stream 63 MB through a 50 MB L2, so marking them evict-first may leave
the codes in L2 for the down GEMM that reads them next.

This times every (warps, eviction policy) form of the kernel side by side (GPU time of CUDA-graph
replays, the artifact's form first), alone and followed by the down GEMM (torch._scaled_mm, as
Fp8Linear runs it), checks that every form gives the default form's codes and scales bit for
bit, and does the same for `lamp::rms_norm_fp8` (968 x 2048, the gate/up GEMM's input rows).

`--gemms` times the two FP8 GEMMs themselves instead (17 layers' distinct weights per timed
launch, as the prefix runs them) in both orientations: today's rows @ W^T (968 x N out) and the
swapped W @ rows^T (N x 968 out: the weight as cuBLAS's M side, so it picks other kernels), each
with float32 and fast sums. The down GEMM runs at 1.15 PFLOP/s in the graph against gate/up's
1.44; if the swapped down were faster, its 4 MB output could be read transposed by the norm that
takes the residual add.

Usage (device tool): PYTHONPATH=$PWD python3 scripts/device/fp8_rows_probe.py --out $OUT/x.json
[--gemms]
"""

import argparse
import json

import torch

from lamp_ros.kernels import triton_kernels, tuning

ROWS, HIDDEN, WIDTH, LAYERS = 968, 16384, 2048, 17
GEGLU_FORMS = [(w, e) for w in (16, 4, 8, 32) for e in ('', 'evict_first')]
NORM_WARPS = (4, 2, 8, 16)  # the norm form loads 4 MB: no L2 policy to try


def _same(a, b) -> bool:
    return all(torch.equal(x.view(torch.uint8) if x.dtype == torch.float8_e4m3fn else x,
                           y.view(torch.uint8) if y.dtype == torch.float8_e4m3fn else y)
               for x, y in zip(a, b))


def time_gemms() -> dict:
    """Per layer: gate/up (2048 -> 32768) and down (16384 -> 2048), both orientations."""
    dev, bf16, e4m3 = 'cuda', torch.bfloat16, torch.float8_e4m3fn
    result = {}
    for name, n, k in (('gate_up', 2 * HIDDEN, WIDTH), ('down', WIDTH, HIDDEN)):
        weights = [(torch.randn(n, k, device=dev) * 0.5).to(e4m3) for _ in range(LAYERS)]
        w_scale = torch.full((n, 1), 2.0 ** -6, device=dev)
        rows = (torch.randn(ROWS, k, device=dev) * 0.5).to(e4m3)
        r_scale = torch.full((ROWS, 1), 2.0 ** -4, device=dev)
        # cuBLASLt's FP8 GEMM wants the second operand's dims in multiples of 16: the swapped
        # form reads the rows padded to 976 with zero codes (what its real form would store)
        padded = ROWS + -ROWS % 16
        rows_t = torch.zeros(padded, k, device=dev).to(e4m3)
        rows_t[:ROWS] = rows
        r_scale_t = torch.ones(1, padded, device=dev)
        r_scale_t[0, :ROWS] = r_scale.view(-1)
        for fast in (False, True):
            def today(i, f=fast):  # (968, n)
                return torch._scaled_mm(rows, weights[i].t(), r_scale, w_scale.view(1, -1),
                                        out_dtype=bf16, use_fast_accum=f)

            def swapped(i, f=fast):  # (n, 976)
                return torch._scaled_mm(weights[i], rows_t.t(), w_scale, r_scale_t,
                                        out_dtype=bf16, use_fast_accum=f)
            a, b = today(0).float(), swapped(0)[:, :ROWS].float().t()
            err = float((a - b).norm() / a.norm())
            flops = 2 * ROWS * n * k
            for form, fn in (('today', today), ('swapped', swapped)):
                t = tuning.gpu_time_ms(lambda: [fn(i) for i in range(LAYERS)]) / LAYERS
                key = f'{name} {form} {"fast" if fast else "fp32"} sums'
                result[key] = {'us': t * 1e3, 'pflops': flops / t / 1e12,
                               'rel_l2_between_orientations': err}
                print(f'{key:28s} {t * 1e3:6.1f} us a layer ({flops / t / 1e12:.2f} PFLOP/s), '
                      f'orientations differ by {err:.1e}', flush=True)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--out', default='fp8_rows_probe.json')
    ap.add_argument('--gemms', action='store_true', help='time the FP8 GEMMs\' orientations')
    args = ap.parse_args()
    torch.manual_seed(0)
    if args.gemms:
        with open(args.out, 'w') as f:
            json.dump({'gpu': torch.cuda.get_device_name(), **time_gemms()}, f, indent=1)
        return
    dev, bf16 = 'cuda', torch.bfloat16
    gate_up = torch.randn(ROWS, 2 * HIDDEN, dtype=bf16, device=dev)
    gate, up = gate_up.split(HIDDEN, -1)  # views of one GEMM output, as in the graph
    down = (torch.randn(WIDTH, HIDDEN, device=dev) * 0.02).to(torch.float8_e4m3fn)
    down_scale = torch.full((1, WIDTH), 2.0 ** -6, device=dev)
    x = torch.randn(ROWS, WIDTH, dtype=bf16, device=dev)
    copy_dst = torch.empty_like(gate_up)
    t_copy = tuning.gpu_time_ms(lambda: copy_dst.copy_(gate_up))
    moved = 2 * gate_up.numel() * 2
    result = {'gpu': torch.cuda.get_device_name(), 'rows': ROWS, 'hidden': HIDDEN,
              'device_copy_us': t_copy * 1e3, 'device_copy_tbps': moved / t_copy / 1e9,
              'geglu_fp8': [], 'rms_norm_fp8': []}
    print(f'device copy of gate/up ({moved / 1e6:.0f} MB moved): {t_copy * 1e3:.1f} us, '
          f'{moved / t_copy / 1e9:.2f} TB/s', flush=True)
    geglu_bytes = gate_up.numel() * 2 + ROWS * HIDDEN
    want = triton_kernels.fp8_rows(gate, up)
    for warps, evict in GEGLU_FORMS:
        def rows(w=warps, e=evict):
            return triton_kernels.fp8_rows(gate, up, warps=w, evict=e)

        def rows_then_down(w=warps, e=evict):
            codes, scale = rows(w, e)
            return torch._scaled_mm(codes, down.t(), scale, down_scale, out_dtype=bf16,
                                    use_fast_accum=False)
        same = _same(rows(), want)
        t, t_pair = tuning.gpu_time_ms(rows), tuning.gpu_time_ms(rows_then_down)
        row = {'warps': warps, 'evict': evict or 'default', 'us': t * 1e3,
               'tbps': geglu_bytes / t / 1e9, 'with_down_us': t_pair * 1e3, 'same': same}
        result['geglu_fp8'].append(row)
        print(f'geglu_fp8 {ROWS}x{HIDDEN} warps {warps:2d} {row["evict"]:11s} {t * 1e3:6.1f} us '
              f'({row["tbps"]:.2f} TB/s), then down {t_pair * 1e3:6.1f} us, same codes {same}',
              flush=True)
    want = triton_kernels.fp8_rows(x, eps=1e-6)
    for warps in NORM_WARPS:
        def norm(w=warps):
            return triton_kernels.fp8_rows(x, eps=1e-6, warps=w)
        same = _same(norm(), want)
        t = tuning.gpu_time_ms(norm)
        result['rms_norm_fp8'].append({'warps': warps, 'us': t * 1e3, 'same': same})
        print(f'rms_norm_fp8 {ROWS}x{WIDTH} warps {warps:2d} {t * 1e3:6.1f} us, same codes '
              f'{same}', flush=True)
    with open(args.out, 'w') as f:
        json.dump(result, f, indent=1)


if __name__ == '__main__':
    main()
