"""The host side of scripts/device/attention_wgmma_probe.py, without a GPU: the packing of the
prefix's K/V, the key slots, the kernel's shared-memory addressing (its Python mirror against the
layout wgmma reads), and `emulate`, the kernel's data flow with its rounding points, against the
reference attention. (The kernel compiles for sm_90a in test_offline_cuda.py; that it computes
what `emulate` does is checked on the device.)"""

import pytest
import torch

from bench.hopper_ptx import pack_tiles, unpack_tiles
from lamp_ros.kernels import ops
from load_script import load_script

probe = load_script('scripts', 'device', 'attention_wgmma_probe.py')
SCALE = probe.D ** -0.5


def test_the_kernels_addresses_are_the_packed_layout_wgmma_reads():
    torch.manual_seed(0)
    wide = torch.randn(64, 256).to(torch.bfloat16)  # q or a K chunk: rows x d
    tall = torch.randn(256, 64).to(torch.bfloat16)  # a V^T chunk: d x keys
    for m, at in ((wide, probe.rows256_at), (tall, probe.cols64_at)):
        data = pack_tiles(m)
        for r, c in torch.randint(0, 64, (200, 2)).tolist() + [(63, 63), (0, 0)]:
            r, c = (r, 4 * c + 3) if m is wide else (4 * r + 3, c)
            pos = at(r, c)
            assert torch.equal(data[pos:pos + 2].view(torch.bfloat16), m[r, c].view(1))


def test_prefix_kv_are_packed_chunk_by_chunk_with_zeros_past_the_prefix():
    x = probe.acp.inputs('cpu', True, 3)
    kp, vp = torch.cat([x['kp'], x['kp'] + 1]), torch.cat([x['vp'], -x['vp']])  # batch of 2
    kpk, vpk = probe.pack_prefix(kp, vp)
    chunks = probe.key_chunks()
    assert chunks == 16 and kpk.shape == vpk.shape == (2, chunks * probe.CHUNK)
    for b in range(2):
        keys = unpack_tiles(kpk[b], chunks * 64, probe.D)
        assert torch.equal(keys[:probe.PREFIX], kp[b])
        assert not keys[probe.PREFIX:].any()
        for c in (0, 7, 15):
            vt = unpack_tiles(vpk[b, c * probe.CHUNK:(c + 1) * probe.CHUNK], probe.D, 64)
            want = torch.zeros(64, probe.D, dtype=torch.bfloat16)
            part = vp[b, c * 64:(c + 1) * 64]
            want[:len(part)] = part
            assert torch.equal(vt.t(), want)


def test_the_own_keys_must_share_the_last_chunk():
    assert probe.key_chunks(968, 50) == 16
    assert probe.key_chunks(960, 64) == 16
    for prefix, own in ((950, 50), (968, 60), (900, 50)):  # straddle, straddle, 15 chunks
        with pytest.raises(ValueError, match='last of'):
            probe.key_chunks(prefix, own)


@pytest.mark.parametrize('cluster', [16, 8])
def test_the_kernels_data_flow_computes_the_reference_attention(cluster):
    x = probe.acp.inputs('cpu', True, 1)  # token 3 sees no key: the finite fill, uniform
    want = ops.mqa_attention_reference(x['qkv'], x['kp'], x['vp'], x['cos'], x['sin'],
                                       x['mask'], probe.HEADS, SCALE)
    got = probe.emulate(x['qkv'], probe.pack_prefix(x['kp'], x['vp']), x['cos'], x['sin'],
                        x['mask'], probe.HEADS, SCALE, cluster=cluster)
    assert got.shape == want.shape and got.dtype == torch.bfloat16
    assert bool(got.isfinite().all())
    assert probe.acp.rel_error(got, want) < 5e-3  # bf16 q, P and output: 3.5e-3 here
    torch.testing.assert_close(got[0, 3].float(), want[0, 3].float(), atol=2e-2, rtol=0)


def test_every_form_fits_shared_memory_and_splits_the_chunks_evenly():
    for form in probe.FORMS:
        assert form.chunks_per_block * form.cluster == probe.key_chunks()
        assert form.shared + 1024 <= 227 * 1024  # + the static barriers and row statistics
        assert 4 * probe.TILE + form.chunks_per_block * 2 * probe.CHUNK >= 64 * probe.OS * 4


# A literal model of one cluster of the kernel: its shared memory as bytes, every store at the
# address the kernel computes, each wgmma reading its operands through the descriptor as the
# hardware does for the no-swizzle K-major layout (element (i, k) of a 16-wide k-step at start +
# (i / 8) SBO + (k / 8) LBO + (i % 8) 16 + (k % 8) 2; wgmma_check.py proved it on the H200 for
# LBO 128, SBO 1024), each thread's accumulators at the fragment positions wgmma_check.py
# confirmed. It follows the kernel's loops, not the intended math, so an address, a slot or a
# fragment index that is off shows up as a wrong result here.

def _bf16(x):
    return x.to(torch.bfloat16)


def _operand(smem, start, rows):
    """(rows, 16) bf16 read by a wgmma descriptor (LBO 128, SBO 1024) at byte `start`."""
    i = torch.arange(rows)[:, None]
    k = torch.arange(16)[None, :]
    at = start + (i // 8) * 1024 + (k // 8) * 128 + (i % 8) * 16 + (k % 8) * 2
    lo, hi = smem[at].to(torch.int32), smem[at + 1].to(torch.int32)
    return ((hi << 8) | lo).to(torch.int16).view(torch.bfloat16).float()


def _store(smem, at, values):
    """bf16 values at byte addresses `at` (tensors of the same shape)."""
    data = _bf16(values).reshape(-1).view(torch.int16).to(torch.int32)
    at = at.reshape(-1)
    smem[at] = (data & 0xFF).to(torch.uint8)
    smem[at + 1] = ((data >> 8) & 0xFF).to(torch.uint8)


def _rotate(x1, x2, c, s, scale):  # rotate8: (u c - v s) scale, (v c + u s) scale in float32
    return (x1 * c - x2 * s) * scale, (x2 * c + x1 * s) * scale


def _fragment():
    """Per thread (128): its two rows r0, r1 and its column pair base 2 (lane % 4)."""
    tid = torch.arange(128)
    warp, lane = tid // 32, tid % 32
    r0 = 16 * warp + lane // 4
    return r0, r0 + 8, 2 * (lane % 4), warp


def _block(form, x, packed, rb, rank, scale):
    """One block of the kernel -> (m (64,), l (64,), o (64, 256)) as it holds them before the
    merge (per row: the quad's shared max, the summed l, the fragment outputs)."""
    P = probe
    T, n, H, D, HALF, BN = P.PREFIX, P.ROWS, P.HEADS, P.D, P.HALF, P.BN
    qkv = x['qkv'][0].float()
    cosv, sinv, mask = x['cos'][0].float(), x['sin'][0].float(), x['mask'][0]
    kpk, vpk = packed[0][0], packed[1][0]
    CH, TILE, CHUNK = form.chunks_per_block, P.TILE, P.CHUNK
    smem = torch.zeros(form.shared, dtype=torch.uint8)
    q_s, kv_s = 0, 4 * TILE
    p_s = kv_s + CH * 2 * CHUNK
    width = T + n
    for c in range(CH):  # the bulk copies: the chunk's K then V^T tiles
        at = (rank * CH + c) * CHUNK
        smem[kv_s + c * 2 * CHUNK:kv_s + c * 2 * CHUNK + CHUNK] = kpk[at:at + CHUNK]
        smem[kv_s + c * 2 * CHUNK + CHUNK:kv_s + (c + 1) * 2 * CHUNK] = vpk[at:at + CHUNK]
    i = torch.arange(BN * (HALF // 8))  # q: every item of the kernel's loop at once
    r, g = i >> 4, i & 15
    t, h = rb * 8 + (r >> 3), r & 7
    d = g[:, None] * 8 + torch.arange(8)[None, :]
    ok = (t < n)[:, None]
    tt = t.clamp(max=n - 1)[:, None]
    x1 = _bf16(qkv[tt, h[:, None] * D + d]).float()
    x2 = _bf16(qkv[tt, h[:, None] * D + HALF + d]).float()
    y1, y2 = _rotate(x1, x2, cosv[tt, d], sinv[tt, d], scale * P.LOG2E)
    base1 = torch.tensor([P.rows256_at(a, b) for a, b in zip(r.tolist(), (g * 8).tolist())])
    base2 = torch.tensor([P.rows256_at(a, HALF + b)
                          for a, b in zip(r.tolist(), (g * 8).tolist())])
    lanes = torch.arange(8)[None, :] * 2
    _store(smem, q_s + base1[:, None] + lanes, torch.where(ok, y1, 0.))
    _store(smem, q_s + base2[:, None] + lanes, torch.where(ok, y2, 0.))
    for c in range(CH):  # the own keys, where this block's chunk holds them
        first = (rank * CH + c) * BN
        if T >= first + BN or T + n <= first:
            continue
        k_s, v_s = kv_s + c * 2 * CHUNK, kv_s + c * 2 * CHUNK + CHUNK
        i = torch.arange(n * (HALF // 8))
        j, g = i >> 4, i & 15
        slot = T + j - first
        d = g[:, None] * 8 + torch.arange(8)[None, :]
        k1, k2 = qkv[j[:, None], H * D + d], qkv[j[:, None], H * D + HALF + d]
        y1, y2 = _rotate(k1, k2, cosv[j[:, None], d], sinv[j[:, None], d], 1.0)
        b1 = torch.tensor([P.rows256_at(a, b) for a, b in zip(slot.tolist(), (g * 8).tolist())])
        b2 = torch.tensor([P.rows256_at(a, HALF + b) for a, b in zip(slot.tolist(),
                                                                     (g * 8).tolist())])
        _store(smem, k_s + b1[:, None] + lanes, y1)
        _store(smem, k_s + b2[:, None] + lanes, y2)
        i = torch.arange(n * (D // 8))
        j, g = i >> 5, i & 31
        slot = T + j - first
        for u in range(8):
            at = torch.tensor([P.cols64_at(a, b)
                               for a, b in zip((g * 8 + u).tolist(), slot.tolist())])
            _store(smem, v_s + at, qkv[j, (H + 1) * D + g * 8 + u])
    r0, r1, col2, warp = _fragment()
    t0, t1 = rb * 8 + 2 * warp, rb * 8 + 2 * warp + 1
    o = torch.zeros(128, 128)
    m0 = m1 = torch.full((128,), float('-inf'))
    l0, l1 = torch.zeros(128), torch.zeros(128)
    for c in range(CH):
        k_s = kv_s + c * 2 * CHUNK
        s_full = torch.zeros(64, 64)
        for k in range(D // 16):
            step = (k >> 2) * TILE + 256 * (k & 3)
            s_full += _operand(smem, q_s + step, 64) @ _operand(smem, k_s + step, 64).t()
        key0 = (rank * CH + c) * BN + col2  # per thread
        s = torch.zeros(128, 32)  # the thread's 32 accumulators, s[4 j + slot]
        for j in range(8):
            for e in range(2):
                key = key0 + 8 * j + e
                inside = key < width
                kk = key.clamp(max=width - 1)
                keep0 = torch.where(t0 < n, mask[t0.clamp(max=n - 1), kk], True)
                keep1 = torch.where(t1 < n, mask[t1.clamp(max=n - 1), kk], True)
                v0 = s_full[r0, 8 * j + col2 + e]
                v1 = s_full[r1, 8 * j + col2 + e]
                s[:, 4 * j + e] = torch.where(~inside, float('-inf'),
                                              torch.where(keep0, v0, torch.tensor(P.FILL)))
                s[:, 4 * j + 2 + e] = torch.where(~inside, float('-inf'),
                                                  torch.where(keep1, v1, torch.tensor(P.FILL)))
        big0 = torch.maximum(m0, s[:, [4 * j + e for j in range(8) for e in range(2)]].amax(1))
        big1 = torch.maximum(m1, s[:, [4 * j + 2 + e for j in range(8) for e in range(2)]]
                             .amax(1))
        big0 = big0.view(32, 4).amax(1).repeat_interleave(4)  # the quad's shuffles
        big1 = big1.view(32, 4).amax(1).repeat_interleave(4)
        a0, a1 = torch.exp2(m0 - big0), torch.exp2(m1 - big1)
        m0, m1 = big0, big1
        p = torch.exp2(s - torch.stack([m0, m0, m1, m1], 1).repeat(1, 8))
        l0 = l0 * a0 + p[:, [4 * j + e for j in range(8) for e in range(2)]].sum(1)
        l1 = l1 * a1 + p[:, [4 * j + 2 + e for j in range(8) for e in range(2)]].sum(1)
        for j in range(8):
            for e, (rows, slot) in enumerate(((r0, 0), (r0, 1), (r1, 2), (r1, 3))):
                col = 8 * j + col2 + (e % 2)
                at = torch.tensor([P.tile_at(a, b) for a, b in zip(rows.tolist(),
                                                                   col.tolist())])
                _store(smem, p_s + at, p[:, 4 * j + slot])
        o[:, 0::4] *= a0[:, None]
        o[:, 1::4] *= a0[:, None]
        o[:, 2::4] *= a1[:, None]
        o[:, 3::4] *= a1[:, None]
        o_full = torch.zeros(64, 256)
        for k in range(BN // 16):
            a = _operand(smem, p_s + 256 * k, 64)
            if form.pv_n64:  # four 64-column MMAs, each on its V^T tile
                for t in range(D // 64):
                    o_full[:, 64 * t:64 * (t + 1)] += \
                        a @ _operand(smem, k_s + CHUNK + t * TILE + 256 * k, 64).t()
            else:
                o_full += a @ _operand(smem, k_s + CHUNK + 256 * k, 256).t()
        for j in range(32):  # the fragment of o_full each thread's accumulators receive
            o[:, 4 * j] += o_full[r0, 8 * j + col2]
            o[:, 4 * j + 1] += o_full[r0, 8 * j + col2 + 1]
            o[:, 4 * j + 2] += o_full[r1, 8 * j + col2]
            o[:, 4 * j + 3] += o_full[r1, 8 * j + col2 + 1]
    l0 = l0.view(32, 4).sum(1).repeat_interleave(4)
    l1 = l1.view(32, 4).sum(1).repeat_interleave(4)
    m_rows, l_rows, o_rows = torch.zeros(64), torch.zeros(64), torch.zeros(64, 256)
    m_rows[r0], m_rows[r1], l_rows[r0], l_rows[r1] = m0, m1, l0, l1
    for j in range(32):
        o_rows[r0, 8 * j + col2], o_rows[r0, 8 * j + col2 + 1] = o[:, 4 * j], o[:, 4 * j + 1]
        o_rows[r1, 8 * j + col2], o_rows[r1, 8 * j + col2 + 1] = o[:, 4 * j + 2], o[:, 4 * j + 3]
    return m_rows, l_rows, o_rows


@pytest.mark.parametrize('cluster,rb,pv_n64', [(16, 0, False), (16, 6, False), (8, 3, False),
                                               (16, 2, True)])
def test_a_literal_model_of_the_kernel_computes_the_reference(cluster, rb, pv_n64):
    """One cluster (row block rb: tokens 8 rb ..; rb 6 holds the last 2 tokens) through the
    kernel's model, merged as the kernel merges, against the reference attention."""
    form = probe.Form(cluster, pv_n64)
    x = probe.acp.inputs('cpu', True, 2)
    x['mask'][0, 8 * rb + 1, 5:900] = False  # a token that sees only some keys
    packed = probe.pack_prefix(x['kp'], x['vp'])
    want = ops.mqa_attention_reference(x['qkv'], x['kp'], x['vp'], x['cos'], x['sin'],
                                       x['mask'], probe.HEADS, SCALE).float()
    blocks = [_block(form, x, packed, rb, rank, SCALE) for rank in range(cluster)]
    big = torch.stack([m for m, _, _ in blocks]).amax(0)
    total = sum(l_ * torch.exp2(m - big) for m, l_, _ in blocks)
    merged = sum(o * (torch.exp2(m - big) / total)[:, None] for m, _, o in blocks)
    tokens = min(8, probe.ROWS - 8 * rb)
    got = _bf16(merged[:tokens * 8]).float().reshape(tokens, 8 * probe.D)
    ref = want[0, 8 * rb:8 * rb + tokens]
    # bf16 q, P and output, as the Triton pair (6-7e-3 against the reference on the H200)
    assert float((got - ref).abs().max() / ref.abs().max()) < 1e-2
    emulated = probe.emulate(x['qkv'], packed, x['cos'], x['sin'], x['mask'], probe.HEADS,
                             SCALE, cluster=cluster)[0, 8 * rb:8 * rb + tokens].float()
    torch.testing.assert_close(got, emulated, atol=4e-3, rtol=1e-2)  # an output ulp at most
