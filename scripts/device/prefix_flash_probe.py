"""Can one flash kernel beat the prefix attention's two GEMMs around `lamp::masked_softmax`?

The prefix's attention (pi05_full: 8 query heads against one K/V head of 256, 832 rows at the
bench's prompt, 968 at the full length) runs as q (rows = token x head) @ K^T, the masked
softmax, @ V: 34 us a layer on the H200 (11.1 + 14.8 + 8.6), for 5.7 GFLOP (7 us at the bf16
rate). `lamp::mqa_flash` (the expert attention's kernel over pre-rotated q: the head dim in two
halves, q scaled and rounded before the dot) took 46 us at its best tiling, so the artifact
keeps the GEMMs. The score matrix they write and read back (6,656 x 832 in bf16, 11 MB, twice)
is what a flash kernel saves; `whole_d` is one written for this shape: the head dim as one dot
(256 wide: one dot per key block, not two halves), the scale applied to the float32 scores, the
mask read as the eager code's boolean (b, n, T) rows (the finite fill, so a fully masked padding
row gets the eager code's uniform softmax), each program sweeping every key. `nomask` is the same
without the mask loads at whole_d's fastest tiling (time only: its padding rows differ), to
show what the mask costs.

Every form is checked against the float32 eager attention and timed as the build times tiles:
one CUDA-graph launch over `--layers` distinct q/k/v, per layer.

    python3 scripts/device/prefix_flash_probe.py [--out FILE.json] [--layers 17]
            [--rows 832,968] [--tiles 64x64x4x2,...]
"""

import argparse
import os
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.getcwd())
from bench.probes import save_report  # noqa: E402
from lamp_ros.kernels import tuning  # noqa: E402
from lamp_ros.kernels import triton_expert, triton_kernels  # noqa: E402
from lamp_ros.kernels.triton_expert import softmax_block  # noqa: E402

LOG2E = 1.4426950408889634
HEADS, D, IMAGE_TOKENS = 8, 256, 768
TILES = ('64x64x4x2,64x64x4x3,64x32x4x3,64x128x4x2,128x64x8x2,128x32x8x3,128x64x8x3,'
         '128x128x8x2,64x64x8x2,128x32x4x2')


@triton.jit
def _whole_d_kernel(q_ptr, k_ptr, v_ptr, mask_ptr, out_ptr, n, n_keys, heads, stride_q_b,
                    stride_q_t, stride_k_b, stride_k_t, stride_v_b, stride_v_t, qk_scale,
                    D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, MASK: tl.constexpr):
    """Rows = (token, head) pairs of q (token-major) against one K/V head, all keys a program."""
    pid = tl.program_id(0)
    b = tl.program_id(1)
    rows_total = n * heads
    r = pid * BM + tl.arange(0, BM)
    r_ok = r < rows_total
    t = tl.where(r_ok, r // heads, 0)
    h = r % heads
    d = tl.arange(0, D)
    q = tl.load(q_ptr + b * stride_q_b + t[:, None] * stride_q_t + h[:, None] * D + d[None, :],
                mask=r_ok[:, None], other=0.0)
    mask_row = mask_ptr + (b * n + t)[:, None] * n_keys
    m_i = tl.full((BM,), float('-inf'), dtype=tl.float32)
    l_i = tl.zeros((BM,), dtype=tl.float32)
    acc = tl.zeros((BM, D), dtype=tl.float32)
    for k0 in range(0, n_keys, BN):
        keys = k0 + tl.arange(0, BN)
        key_ok = keys < n_keys
        k = tl.load(k_ptr + b * stride_k_b + keys[:, None] * stride_k_t + d[None, :],
                    mask=key_ok[:, None], other=0.0)
        v = tl.load(v_ptr + b * stride_v_b + keys[:, None] * stride_v_t + d[None, :],
                    mask=key_ok[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale  # log2 units, float32
        keep = 1
        if MASK:
            keep = tl.load(mask_row + keys[None, :], mask=r_ok[:, None] & key_ok[None, :],
                           other=0)
        m_i, alpha, p, l_i = softmax_block(s, keep, key_ok, m_i, l_i)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
    l_i = tl.where(r_ok, l_i, 1.0)
    out_at = out_ptr + (b * rows_total + r)[:, None] * D + d[None, :]
    tl.store(out_at, (acc / l_i[:, None]).to(out_ptr.dtype.element_ty), mask=r_ok[:, None])


def whole_d(q, k, v, mask, tiles, use_mask=True):
    """q (b, n, heads, d) rotated, k / v (b, T, d), mask (b, n, T) bool -> (b, n, heads * d)."""
    block_m, block_n, warps, stages = tiles
    b, n, heads, d = q.shape
    T = k.shape[1]
    out = torch.empty((b, n, heads * d), dtype=q.dtype, device=q.device)
    keep = mask.contiguous().view(torch.uint8)
    grid = (triton.cdiv(n * heads, block_m), b)
    _whole_d_kernel[grid](q, k, v, keep, out, n, T, heads, q.stride(0), q.stride(1),
                          k.stride(0), k.stride(1), v.stride(0), v.stride(1),
                          d ** -0.5 * LOG2E, D=d, BM=block_m, BN=block_n, MASK=use_mask,
                          num_warps=warps, num_stages=stages)
    return out


def gemms(q, k, v, mask):
    """The artifact's form (compiler/passes/modules.py: Attention.attention, kernel path)."""
    b, n, heads, d = q.shape
    scores = torch.matmul(q.reshape(b, n * heads, d), k.transpose(1, 2))
    probs = triton_kernels.masked_softmax(scores, mask, heads, d ** -0.5)
    return torch.matmul(probs, v).reshape(b, n, heads * d)


def reference(q, k, v, mask):
    """The eager code's attention in float32: finite fill, softmax, values."""
    b, n, heads, d = q.shape
    s = torch.einsum('bnhd,btd->bnht', q.float(), k.float()) * d ** -0.5
    s = s.masked_fill(~mask[:, :, None, :], torch.finfo(torch.float32).min)
    return torch.einsum('bnht,btd->bnhd', s.softmax(-1), v.float()).reshape(b, n, heads * d)


def operands(layers, n, valid):
    """Per layer q (1, n, 8, 256), k, v (1, n, 256) and the prefix mask: the first `valid`
    tokens see each other, the padding tokens see nothing (their rows: the uniform fill)."""
    g = torch.Generator(device='cuda').manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, device='cuda', generator=g).to(torch.bfloat16)
    ok = torch.arange(n, device='cuda') < valid
    mask = (ok[:, None] & ok[None, :])[None]
    return [(randn(1, n, HEADS, D), randn(1, n, D), randn(1, n, D), mask)
            for _ in range(layers)]


def timed(fn, ops, want, layers):
    got = fn(*ops[0])
    us = tuning.gpu_time_ms(lambda: [fn(*o) for o in ops]) * 1e3 / layers
    return {'us': round(us, 2), 'rel_err': tuning.disagreement(got, want)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--out', default='prefix_flash_probe.json')
    parser.add_argument('--layers', type=int, default=17)
    parser.add_argument('--rows', default='832,968', help='prefix lengths (prompt graphs)')
    parser.add_argument('--tiles', default=TILES, help='whole_d tilings: BMxBNxwarpsxstages')
    args = parser.parse_args()
    report = {'gpu': torch.cuda.get_device_name(), 'torch': torch.__version__,
              'triton': triton.__version__, 'layers': args.layers, 'shapes': {}}
    tilings = [tuple(int(x) for x in t.split('x')) for t in args.tiles.split(',')]
    with torch.no_grad():
        for n in (int(x) for x in args.rows.split(',')):
            valid = IMAGE_TOKENS + (52 if n < 900 else 199)
            ops = operands(args.layers, n, valid)
            want = reference(*ops[0])
            res = report['shapes'][str(n)] = {'valid_tokens': valid}

            def run(name, fn):
                try:
                    res[name] = timed(fn, ops, want, args.layers)
                except Exception as e:  # a tiling that does not fit is a result, not a crash
                    res[name] = {'error': f'{type(e).__name__}: {e}'[:300]}
                print(n, name, res[name], flush=True)
                save_report(report, args.out)
            run('gemms (the artifact)', gemms)
            for tiles in tuning.flash_candidates():
                run(f'mqa_flash {tiles}', lambda q, k, v, m, t=tiles: triton_expert.mqa_flash(
                    q, k, v, m, HEADS, D ** -0.5, t))
            for tiles in tilings:
                run(f'whole_d {list(tiles)}', lambda q, k, v, m, t=tiles: whole_d(q, k, v, m, t))
            best = min((r['us'], name) for name, r in res.items()
                       if isinstance(r, dict) and 'us' in r and r['rel_err'] < 2e-2)
            ours = min(((r['us'], tiles) for tiles in tilings
                        if 'us' in (r := res[f'whole_d {list(tiles)}'])), default=None)
            if ours:
                run(f'nomask {list(ours[1])}',
                    lambda q, k, v, m, t=ours[1]: whole_d(q, k, v, m, t, use_mask=False))
            res['best'] = best[1]
            print(n, 'best:', best, flush=True)
    save_report(report, args.out)


if __name__ == '__main__':
    main()
