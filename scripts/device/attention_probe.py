"""Would FlashAttention-2 (the one inside PyTorch) beat lamp's attention forms on the H200, if
the prefix's key padding became a key count instead of a mask? Measured side by side at the full
policy's shapes, before any compiler work.

pi0.5's masks are key padding only for every row anybody reads: a valid prefix token sees every
valid prefix token, an action token every valid prefix token and every action token (padding
query rows see nothing; their outputs only feed their own K/V, which nobody sees). So with the
valid prefix tokens first, the attention is unmasked over the first `valid` keys, which
FlashAttention takes as `seqused_k` (a device tensor: no new shapes, CUDA-graph safe).

  prefix attention   968 queries x 8 heads against the one K/V head, 900 valid keys: two GEMMs
                     around lamp::masked_softmax (today) against FA2 with seqused_k, and SDPA
                     (cuDNN, flash) on the first 900 keys for comparison
  expert attention   50 queries x 8 heads against 900 valid prefix keys + 50 own keys, each of
                     18 layers on its own K/V: lamp::mqa_attention (today, RoPE of q and the
                     own k inside) against FA2 over a K/V buffer with the own keys written after
                     the valid ones (q and k rotated before: lamp::rope's time is listed)
  attention merge    (measured at commit df1c9cd, then reverted) lamp::mqa_attention's key
                     slices merged by the last slice of each row block to finish, its loads
                     unrolled over the split count, instead of by `_mqa_combine_kernel`
  expert attention   (expert_attention_keys) the same kernel at 64-1664 prefix keys, and on
    keys            the prefix K/V stored as FP8 widened in registers: what the bytes each
                     program takes in cost
  expert attention   (expert_attention_mask_stride) the same kernel with the mask's rows at
    mask stride      their own width (882 / 1018 bytes) against the same mask as a view of a
                     buffer whose rows are padded to a multiple of 16 bytes
  vision add + norm  the residual add then LayerNorm (today) against the LayerNorm alone: what a
                     fused add + LayerNorm kernel could save at most

    python3 scripts/device/attention_probe.py [--out FILE.json] [--only SECTION,...]

Measured on the H200 (2026-12-01, bench/results/attention_probe_h200.json), nothing taken:
prefix attention 33.7 us today, FA2 32.0, cuDNN SDPA 30.0 and flash SDPA 40.8 on the valid keys
only (so at most 3.7 us a layer, 0.06 ms an inference, for moving the valid prefix tokens first
and the expert's mask with them); expert attention 13.4 us today, FA2 31.4 with any split count
(plus 1.4 us for rotating q in a kernel before); the in-kernel merge 14.9 us against 13.3 at the
chosen tiles and 1.2-4.7 us slower at the others; the vision blocks' residual add costs 1.7 us
beside a 4.4 us LayerNorm (0.09 ms an inference for fusing the two). The expert attention's
mask rows padded to a multiple of 16 bytes (2026-12-03, `h200_mask_stride/`): 12.80-12.92 us
against 12.68 at 832 keys, 13.15-13.18 against 13.25 at 968 (the artifact's tiles), within a
run's spread: its byte loads are not what its fixed ~9 us are spent on.
"""

import os
import sys

import torch
import triton
import triton.language as tl
from torch.nn import functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.getcwd())
from bench.gpu_pi05 import rel_error as rel  # noqa: E402
from bench.probes import run_sections  # noqa: E402
from lamp_ros.kernels import ops, tuning  # noqa: E402

HEADS, D, PREFIX, VALID, HORIZON, LAYERS = 8, 256, 968, 900, 50, 18
DEV, BF = 'cuda', torch.bfloat16


def flash(q, k, v, used_k, splits=None):
    """FA2 varlen over one sequence: q (n, heads, d), k/v (m, 1, d), the first used_k keys."""
    n, m = q.shape[0], k.shape[0]
    cu_q = torch.tensor([0, n], dtype=torch.int32, device=DEV)
    cu_k = torch.tensor([0, m], dtype=torch.int32, device=DEV)

    op = torch.ops.aten._flash_attention_forward.default
    descales = (None,) * 3 if 'q_descale' in str(op._schema) else ()  # torch 2.11's schema
    split = {} if 'num_splits' not in str(op._schema) else {'num_splits': splits}

    def run():
        return op(q, k, v, cu_q, cu_k, n, m, 0.0, False, False, *descales, scale=D ** -0.5,
                  seqused_k=used_k, **split)[0]
    return run


def timed(name, fn, want=None, rows=None, per=1, section=None):
    try:
        got = fn()
        us = tuning.gpu_time_ms(fn) * 1e3 / per
        row = {'us': round(us, 2)}
        if want is not None:
            got = got if not isinstance(got, list) else got[0]
            got = got.reshape(want.shape)
            sel = slice(None) if rows is None else slice(0, rows)
            row['rel_error'] = rel(got[:, sel] if got.dim() > 2 else got[sel],
                                   want[:, sel] if want.dim() > 2 else want[sel])
            row['finite'] = bool(torch.isfinite(got).all())
    except Exception as exc:
        row = f'rejected: {type(exc).__name__}: {str(exc)[-300:]}'
    print(section, name, row, flush=True)
    return row


def prefix_attention():
    n, b = PREFIX, 1
    q = torch.randn(b, n, HEADS, D, dtype=BF, device=DEV)
    k, v = torch.randn(2, b, n, 1, D, dtype=BF, device=DEV)
    valid = torch.zeros(b, n, dtype=torch.bool, device=DEV)
    valid[:, :VALID] = True
    mask = valid[:, None, :] & valid[:, :, None]  # as make_attention_mask builds it
    scale = D ** -0.5
    want = ops.mqa_flash_reference(q, k, v, mask, HEADS, scale)

    def today():
        scores = torch.matmul(q.reshape(b, n * HEADS, D), k.reshape(b, n, D).transpose(1, 2))
        probs = ops.masked_softmax(scores, mask, HEADS, scale)
        return torch.matmul(probs, v.reshape(b, n, D)).reshape(b, n, HEADS * D)

    used = torch.tensor([VALID], dtype=torch.int32, device=DEV)
    out = {'today (GEMMs + masked_softmax)': timed('today', today, want, VALID,
                                                   section='prefix')}
    for splits in (None, 1):
        out[f'fa2 seqused_k, num_splits={splits}'] = timed(
            f'fa2 {splits}', flash(q[0], k[0], v[0], used, splits), want, VALID,
            section='prefix')
    kt, vt = k[:, :VALID].transpose(1, 2), v[:, :VALID].transpose(1, 2)
    for name, backend, gqa in (('cudnn', SDPBackend.CUDNN_ATTENTION, False),
                               ('flash', SDPBackend.FLASH_ATTENTION, True),
                               ('flash', SDPBackend.FLASH_ATTENTION, False)):
        def sdpa():
            kk, vv = (kt, vt) if gqa else (kt.expand(b, HEADS, VALID, D),
                                           vt.expand(b, HEADS, VALID, D))
            with sdpa_kernel([backend]):
                o = F.scaled_dot_product_attention(q.transpose(1, 2), kk, vv, enable_gqa=gqa)
            return o.transpose(1, 2).reshape(b, n, HEADS * D)
        out[f'sdpa {name} first {VALID} keys, gqa={gqa}'] = timed(
            f'sdpa {name} gqa={gqa}', sdpa, want, VALID, section='prefix')
    return out


def expert_attention():
    b, n, T = 1, HORIZON, PREFIX
    qkv = [torch.randn(b, n, (HEADS + 2) * D, dtype=BF, device=DEV) for _ in range(LAYERS)]
    kv = [torch.randn(2, b, T, 1, D, dtype=BF, device=DEV) for _ in range(LAYERS)]
    angle = torch.randn(b, n, D // 2, device=DEV)
    cos, sin = angle.cos(), angle.sin()
    mask = torch.zeros(b, n, T + n, dtype=torch.bool, device=DEV)
    mask[:, :, :VALID] = True
    mask[:, :, T:] = True
    scale = D ** -0.5
    want = ops.mqa_attention_reference(qkv[0], *kv[0], cos, sin, mask, HEADS, scale)
    tiles = [16, 64, 128, 4, 1]  # the H200's choice (kernels/tiles/nvidia_h200.json)

    def today():
        return [ops.mqa_attention(qkv[i], *kv[i], cos, sin, mask, HEADS, scale, tiles)
                for i in range(LAYERS)]

    out = {'today (lamp::mqa_attention, RoPE inside)': timed('today', today, want,
                                                             per=LAYERS, section='expert')}
    # FA2's inputs: q rotated (n, heads, d); the prefix K/V with the own keys after the valid
    # ones (the rotation and that write would be one small kernel before it)
    q_rot, k_own, v_own = [], [], []
    for i in range(LAYERS):
        q, k, v = qkv[i].split([HEADS * D, D, D], dim=-1)
        q_rot.append(ops.rope(q.reshape(b, n, HEADS, D), cos, sin)[0].contiguous())
        k_own.append(ops.rope(k.reshape(b, n, 1, D), cos, sin)[0])
        v_own.append(v.reshape(n, 1, D))
    buffers = []
    for i in range(LAYERS):
        kb = torch.cat([kv[i][0][0, :VALID], k_own[i], kv[i][0][0, VALID:]], 0).contiguous()
        vb = torch.cat([kv[i][1][0, :VALID], v_own[i], kv[i][1][0, VALID:]], 0).contiguous()
        buffers.append((kb, vb))
    used = torch.tensor([VALID + n], dtype=torch.int32, device=DEV)
    x = qkv[0][..., :HEADS * D].reshape(b, n, HEADS, D)
    out['lamp::rope of q (one call)'] = timed('rope q', lambda: ops.rope(x, cos, sin),
                                              section='expert')
    for splits in (None, 2, 4, 8, 16):
        runs = [flash(q_rot[i], *buffers[i], used, splits) for i in range(LAYERS)]
        out[f'fa2 seqused_k, num_splits={splits}'] = timed(
            f'fa2 {splits}', lambda: [r() for r in runs], want, per=LAYERS, section='expert')
    return out


def expert_layers(qkv, kv, cos, sin, mask, tiles):
    """One call of lamp::mqa_attention per layer, each on its own qkv and prefix K/V."""
    def call():
        return [ops.mqa_attention(qkv[i], *kv[i], cos, sin, mask, HEADS, D ** -0.5, tiles)
                for i in range(LAYERS)]
    return call


def expert_attention_keys():
    """How the expert attention's time grows with the prefix keys each program reads, and the
    same kernel on the prefix K/V stored as FP8 (e4m3, one scale of 1: the values are N(0, 1);
    a real form would keep a scale per key row), widened in registers: whether the bytes a
    program takes in are what its ~12 us are spent on. 18 layers of distinct K/V, all keys
    valid, the H200's tiles and 128 keys a split."""
    b, n, out = 1, HORIZON, {}
    angle = torch.randn(b, n, D // 2, device=DEV)
    cos, sin = angle.cos(), angle.sin()
    scale = D ** -0.5
    fp8 = torch.float8_e4m3fn
    for T in (64, 416, 832, 1664):
        qkv = [torch.randn(b, n, (HEADS + 2) * D, dtype=BF, device=DEV) for _ in range(LAYERS)]
        kv = [torch.randn(2, b, T, 1, D, dtype=BF, device=DEV) for _ in range(LAYERS)]
        kv8 = [(k.to(fp8), v.to(fp8)) for k, v in kv]
        mask = torch.ones(b, n, T + n, dtype=torch.bool, device=DEV)
        want = ops.mqa_attention_reference(qkv[0], *kv8[0], cos, sin, mask, HEADS, scale)
        for tiles in ([16, 64, 256, 4, 2], [16, 64, 128, 4, 1], [16, 64, 128, 4, 2]):
            for name, pairs in (('bf16', kv), ('fp8', kv8)):
                # the error is against the FP8 values widened: what the kernel was given
                out[f'T={T} {name} tiles={tiles}'] = timed(
                    f'T={T} {name} {tiles}', expert_layers(qkv, pairs, cos, sin, mask, tiles),
                    want, per=LAYERS, section='keys')
    return out


def expert_attention_mask_stride():
    """The expert attention's mask rows (prefix keys, then the 50 action tokens: 882 bytes at the
    64-token graph's 832 keys, 1018 at 968) start at offsets no multiple of 16, so the kernel
    cannot load their bytes 16 at a time. The same mask as a view of a buffer whose rows are
    padded to a multiple of 16 bytes (896, 1024): the kernel reads the stride it is given. 18
    layers of distinct K/V, strided as the prefix leaves them (k and v of one (T, 2, d)
    buffer), the H200's tiles, every key valid but the prefix's padding."""
    b, n, out, scale = 1, HORIZON, {}, D ** -0.5
    angle = torch.randn(b, n, D // 2, device=DEV)
    cos, sin = angle.cos(), angle.sin()
    for T, valid in ((832, 820), (968, 967)):
        qkv = [torch.randn(b, n, (HEADS + 2) * D, dtype=BF, device=DEV) for _ in range(LAYERS)]
        kv = [torch.randn(b, T, 2, 1, D, dtype=BF, device=DEV).unbind(2) for _ in range(LAYERS)]
        width = T + n
        for pad in (0, 16):  # 16 gives 896 and 1024, as 64 would
            stride = width if not pad else -(-width // pad) * pad
            buffer = torch.zeros(b, n, stride, dtype=torch.bool, device=DEV)
            mask = buffer[:, :, :width]
            mask[:, :, :valid] = True
            mask[:, :, T:] = True
            want = ops.mqa_attention_reference(qkv[0], *kv[0], cos, sin, mask.contiguous(),
                                               HEADS, scale)
            for tiles in ([16, 64, 256, 4, 2], [16, 64, 128, 4, 1]):
                out[f'T={T} row stride {stride} tiles={tiles}'] = timed(
                    f'T={T} stride {stride} {tiles}',
                    expert_layers(qkv, kv, cos, sin, mask, tiles), want, per=LAYERS,
                    section='stride')
    return out


def _launch_mqa(q, stride_q, k, v, mask, T, own, tiles, cos=None, sin=None, combine=True):
    """`triton_expert._attend`'s two launches, the second (the key slices' merge) optional, so
    that each kernel of the pair can be timed alone. k/v (b, T, d) at any token stride."""
    from lamp_ros.kernels import triton_expert as te
    block_m, block_n, kps, warps, stages = tiles
    b, n = q.shape[0], q.shape[1]
    rows = n * HEADS
    row_blocks = -(-rows // block_m)
    prefix_splits = -(-T // kps)
    splits = prefix_splits + (1 if own else 0)
    out = torch.empty((b, n, HEADS * D), dtype=BF, device=DEV)
    f32 = dict(dtype=torch.float32, device=DEV)
    m = torch.empty((b, splits, rows), **f32)
    l_ = torch.empty((b, splits, rows), **f32)
    acc = torch.empty((b, splits, rows, D), **f32)
    keep = mask.view(torch.uint8)
    cs = (cos, sin) if own else (out, out)

    def run():
        te._mqa_kernel[(b * row_blocks, splits)](
            q, k, v, *cs, keep, m, l_, acc, out, n, T, HEADS, stride_q[0], stride_q[1],
            k.stride(0), k.stride(1), v.stride(0), v.stride(1), keep.stride(0), keep.stride(1),
            row_blocks, prefix_splits, kps, D ** -0.5 * te.LOG2E, OWN=own, HALF=D // 2,
            BM=block_m, BN=block_n, PRECISION=te._precision(q.dtype),
            num_warps=warps, num_stages=stages)
        if combine and splits > 1:
            te._mqa_combine_kernel[(b * rows,)](m, l_, acc, out, rows, splits,
                                                SPLITS=triton.next_power_of_2(splits), D=D,
                                                num_warps=4)
        return out
    return run


def expert_attention_anatomy():
    """Where the expert attention's fixed ~9 us go, at the bench prompt's 832 prefix keys (820
    valid), K/V strided as the prefix leaves them, 18 layers of distinct inputs: today's pair,
    its first kernel alone, its own-key split alone (no prefix keys), its prefix splits alone
    (q rotated before), and the form with no own split at all: q rotated and the own k rotated
    and written after the prefix keys by the kernel before (the qkv GEMM's epilogue could), so
    the attention is a plain flash-decoding over T + 50 keys, at several tilings (64-row blocks
    too: Triton's wgmma). Plus an empty kernel's launch, the floor of any form."""
    b, n, T, valid, out = 1, HORIZON, 832, 820, {}
    scale = D ** -0.5
    angle = torch.randn(b, n, D // 2, device=DEV)
    cos, sin = angle.cos().contiguous(), angle.sin().contiguous()
    qkv = [torch.randn(b, n, (HEADS + 2) * D, dtype=BF, device=DEV) for _ in range(LAYERS)]
    # the prefix K/V and 50 rows after them (the own keys' place in the appended form)
    kvbuf = [torch.randn(b, T + n, 2, D, dtype=BF, device=DEV) for _ in range(LAYERS)]
    mask = torch.zeros(b, n, T + n, dtype=torch.bool, device=DEV)
    mask[:, :, :valid] = True
    mask[:, :, T:] = True
    q_rot = []
    for i in range(LAYERS):
        q, k, v = qkv[i].split([HEADS * D, D, D], dim=-1)
        q_rot.append(ops.rope(q.reshape(b, n, HEADS, D), cos, sin).reshape(b, n, HEADS * D))
        kvbuf[i][:, T:, 0] = ops.rope(k.reshape(b, n, 1, D), cos, sin).reshape(b, n, D)
        kvbuf[i][:, T:, 1] = v
    kp = [buf[:, :T, 0] for buf in kvbuf]
    vp = [buf[:, :T, 1] for buf in kvbuf]
    want = ops.mqa_attention_reference(qkv[0], kp[0], vp[0], cos, sin, mask, HEADS, scale)
    want_own = ops.mqa_attention_reference(qkv[0], kp[0][:, :0], vp[0][:, :0], cos, sin,
                                           mask[:, :, T:], HEADS, scale)

    def layers(make):
        runs = [make(i) for i in range(LAYERS)]
        return lambda: [r() for r in runs]

    today = [16, 64, 256, 4, 2]
    stride = qkv[0].stride()[:2]
    out['today: mqa + combine'] = timed('today', layers(lambda i: _launch_mqa(
        qkv[i], stride, kp[i], vp[i], mask, T, True, today, cos, sin)), want, per=LAYERS,
        section='anatomy')
    out['today: mqa kernel alone'] = timed('mqa alone', layers(lambda i: _launch_mqa(
        qkv[i], stride, kp[i], vp[i], mask, T, True, today, cos, sin, combine=False)),
        per=LAYERS, section='anatomy')
    own_mask = mask[:, :, T:]
    out['today: own-key split alone'] = timed('own alone', layers(lambda i: _launch_mqa(
        qkv[i], stride, kp[i][:, :0], vp[i][:, :0], own_mask, 0, True, today, cos, sin)),
        want_own, per=LAYERS, section='anatomy')
    qstride = q_rot[0].stride()[:2]
    out['prefix splits alone (q rotated before) + combine'] = timed(
        'prefix alone', layers(lambda i: _launch_mqa(q_rot[i], qstride, kp[i], vp[i], mask, T,
                                                     False, today)),
        per=LAYERS, section='anatomy')
    kall = [buf[:, :, 0] for buf in kvbuf]
    vall = [buf[:, :, 1] for buf in kvbuf]
    for tiles in ([16, 64, 256, 4, 2], [16, 64, 128, 4, 1], [16, 64, 128, 4, 2],
                  [16, 64, 448, 4, 2], [32, 64, 128, 4, 2], [32, 64, 256, 4, 2],
                  [32, 64, 256, 8, 2], [64, 64, 64, 4, 1], [64, 64, 128, 4, 2],
                  [64, 64, 128, 8, 2], [64, 32, 128, 8, 2], [64, 64, 256, 8, 2],
                  [64, 64, 64, 8, 1]):
        for combine in (True, False):
            name = f'own keys appended, q rotated before, {tiles}' + (
                '' if combine else ', first kernel alone')
            out[name] = timed(name, layers(lambda i, tiles=tiles, combine=combine: _launch_mqa(
                q_rot[i], qstride, kall[i], vall[i], mask, T + n, False, tiles,
                combine=combine)), want if combine else None, per=LAYERS, section='anatomy')
    one = torch.zeros(1, device=DEV)
    out['empty kernel'] = timed('empty', layers(lambda i: lambda: _noop[(1,)](one)),
                                per=LAYERS, section='anatomy')
    return out


@triton.jit
def _noop(x_ptr):
    tl.store(x_ptr, 1.0)


def vision_add_norm():
    x, y = torch.randn(2, 3, 256, 1152, dtype=BF, device=DEV)
    w, bias = torch.randn(2, 1152, dtype=BF, device=DEV)
    return {'add + layer_norm (today)': timed(
                'add+ln', lambda: F.layer_norm(x + y, (1152,), w, bias, 1e-6), section='vision'),
            'layer_norm alone': timed(
                'ln', lambda: F.layer_norm(x, (1152,), w, bias, 1e-6), section='vision')}


def main():
    run_sections(__doc__.splitlines()[0], 'attention_probe.json',
                 (('prefix_attention', prefix_attention),
                  ('expert_attention', expert_attention),
                  ('expert_attention_keys', expert_attention_keys),
                  ('expert_attention_mask_stride', expert_attention_mask_stride),
                  ('expert_attention_anatomy', expert_attention_anatomy),
                  ('vision_add_norm', vision_add_norm)))


if __name__ == '__main__':
    main()
