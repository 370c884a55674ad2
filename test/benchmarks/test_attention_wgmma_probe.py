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
    kpk, vpk = probe.pack_prefix(x['kp'], x['vp'])
    chunks = probe.key_chunks()
    assert chunks == 16 and kpk.shape == vpk.shape == (1, chunks * probe.CHUNK)
    keys = unpack_tiles(kpk[0], chunks * 64, probe.D)
    assert torch.equal(keys[:probe.PREFIX], x['kp'][0])
    assert not keys[probe.PREFIX:].any()
    for c in (0, 7, 15):
        vt = unpack_tiles(vpk[0, c * probe.CHUNK:(c + 1) * probe.CHUNK], probe.D, 64)
        want = torch.zeros(64, probe.D, dtype=torch.bfloat16)
        part = x['vp'][0, c * 64:(c + 1) * 64]
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
