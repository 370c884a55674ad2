"""scripts/device/mlp_chain_probe.py's host side, checked on CPU before the probe ever runs on
the H200: the weights packed in the kernel's stream order, the activations and conditioning in
its layouts, and the kernel's addressing (tile of stream position g, packed offset of an
element), mirrored here in torch, give the reference's numbers. The CUDA itself is checked by
compiling it (test_offline_cuda.py) and, on the device, by the probe's own comparison."""

import json
import os

import pytest
import torch

from bench import hopper_ptx as ptx
from load_script import load_script

probe = load_script('scripts', 'device', 'mlp_chain_probe.py')
TILE = probe.TILE
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def packed(r: int, c: torch.Tensor) -> torch.Tensor:
    """The kernel's packed(r, c), in bytes."""
    return (c // 64) * TILE + (r // 8) * 1024 + ((c % 64) // 8) * 128 + (r % 8) * 16 + (c % 8) * 2


def store_row(buffer: torch.Tensor, row: int, cols: torch.Tensor, values: torch.Tensor) -> None:
    """Write bf16 `values` at (row, cols) of a packed byte buffer, as the kernel's stores do."""
    as_bf16 = buffer.view(torch.bfloat16)
    as_bf16[packed(row, cols) // 2] = values.to(torch.bfloat16)


def w_tile(weights: torch.Tensor, g: int, b: int) -> torch.Tensor:
    """The kernel's W_TILE(g) for block b: the bytes of that tile."""
    per = probe.TILES_PER_LAYER
    start = ((g // per) * probe.BLOCKS * per + b * per + g % per) * TILE
    return weights[start:start + TILE]


def emulate(x0: torch.Tensor, layers: list, trim: bool = False) -> torch.Tensor:
    """The kernel's data flow, block by block, reading and writing only the packed buffers.
    trim: as the TRIM forms, the activation tiles' rows past the real rows' row groups are not
    copied; here they hold NaN (what stale shared memory might), which must not get out."""
    n_layers = len(layers)
    weights = probe.pack_weights(layers)
    inputs = probe.host_inputs(x0, layers)
    xs = [inputs['xs0'].clone(), torch.zeros_like(inputs['xs0'])]
    res = [inputs['res0'].clone(), torch.zeros_like(inputs['res0'])]
    ssq = inputs['ssq'].clone()
    h = torch.zeros(probe.PAD * probe.MLP * 2, dtype=torch.uint8)
    rows = torch.arange(probe.PAD)
    for lay in range(n_layers):
        cur, nxt = lay % 2, 1 - lay % 2
        x_tiles = ptx.unpack_tiles(xs[cur], probe.PAD, probe.WIDTH).float()
        copied = -(-probe.ROWS // 8) * 8 if trim else probe.PAD
        x_tiles[copied:] = float('nan')
        rstd = torch.rsqrt(ssq[cur].sum(0) / probe.WIDTH + probe.EPS)[:, None]
        for b in range(probe.BLOCKS):  # phase A
            g0 = lay * probe.TILES_PER_LAYER
            w = torch.cat([ptx.unpack_tiles(w_tile(weights, g0 + i, b), 64, 64)
                           for i in range(probe.KA)], dim=1).float()
            acc = rstd * (x_tiles @ w.t()) + inputs['bias'][lay, b]
            hv = torch.nn.functional.gelu(acc[:, :32], approximate='tanh') * acc[:, 32:]
            hv[rows >= probe.ROWS] = 0
            for r in range(probe.PAD):
                store_row(h, r, 32 * b + torch.arange(32), hv[r])
        hm = ptx.unpack_tiles(h, probe.PAD, probe.MLP).float()
        hm[copied:] = float('nan')
        parts = torch.zeros(probe.SPLITS, probe.NT_B, probe.PAD, 64)
        for b in range(probe.BLOCKS):  # phase B
            n, s = divmod(b, probe.SPLITS)
            g0 = lay * probe.TILES_PER_LAYER + probe.KA
            w = torch.cat([ptx.unpack_tiles(w_tile(weights, g0 + i, b), 64, 64)
                           for i in range(probe.KB)], dim=1).float()
            k0 = s * probe.KB * 64
            parts[s, n] = hm[:, k0:k0 + probe.KB * 64] @ w.t()
        total = parts[0]
        for s in range(1, probe.SPLITS):  # in K-slice order, as the last slice sums them
            total = total + parts[s]
        y = res[cur].float() + inputs['gate'][lay] * total.permute(1, 0, 2).reshape(
            probe.PAD, probe.WIDTH)
        y[rows >= probe.ROWS] = 0
        y = y.to(torch.bfloat16)
        res[nxt] = y
        ssq[nxt] = (y.float() ** 2).reshape(probe.PAD, probe.NT_B, 64).sum(-1).t()
        scaled = y.float() * inputs['scale'][lay + 1]
        for r in range(probe.PAD):
            store_row(xs[nxt], r, torch.arange(probe.WIDTH), scaled[r])
    return res[n_layers % 2][:probe.ROWS]


def test_kernel_data_flow_over_the_packed_buffers_gives_the_reference():
    torch.manual_seed(0)
    layers = probe.make_layers(2, 'cpu')
    x0 = torch.randn(probe.ROWS, probe.WIDTH).to(torch.bfloat16)
    want = probe.reference(x0, layers).float()
    got = emulate(x0, layers).float()
    assert ((got - want).norm() / want.norm()) < 5e-3
    # and the reference is not trivially satisfied: the layers change X
    assert ((want - x0.float()).norm() / x0.float().norm()) > 0.1


def test_trimmed_activation_copies_leave_the_numbers_as_they_are():
    torch.manual_seed(2)
    layers = probe.make_layers(2, 'cpu')
    x0 = torch.randn(probe.ROWS, probe.WIDTH).to(torch.bfloat16)
    assert torch.equal(emulate(x0, layers, trim=True), emulate(x0, layers))
    assert '#define TRIM 1' in probe.source(probe.Form(tps=2, flags=True, trim=True))


def test_torch_ops_baseline_computes_the_same_mlp_halves():
    torch.manual_seed(1)
    layers = probe.make_layers(2, 'cpu')
    x0 = torch.randn(probe.ROWS, probe.WIDTH).to(torch.bfloat16)
    want = probe.reference(x0, layers).float()
    got = probe.torch_ops(x0, layers)().float()
    assert ((got - want).norm() / want.norm()) < 2e-2


def test_tiles_round_trip_and_the_kernels_offsets_address_them():
    m = torch.randn(64, 256).to(torch.bfloat16)
    data = ptx.pack_tiles(m)
    assert torch.equal(ptx.unpack_tiles(data, 64, 256), m)
    for r, c in ((0, 0), (7, 9), (13, 63), (50, 64), (63, 255)):
        at = int(packed(r, torch.tensor(c)))
        assert data[at:at + 2].view(torch.bfloat16).item() == m[r, c].item()


def test_a_form_whose_ring_cannot_hold_two_steps_is_refused():
    with pytest.raises(ValueError, match='two steps'):
        probe.source(probe.Form(ring=4, tps=4))
    assert '#define TPS 2' in probe.source(probe.Form(tps=2))
    with pytest.raises(ValueError, match='spread sum'):
        probe.source(probe.Form(spread=False, epi_prefetch=True))
    with pytest.raises(ValueError, match='clusters of 1, 2, 4 or 8'):
        probe.source(probe.Form(cluster=3))


def test_the_counters_forms_wait_for_exactly_the_blocks_that_wrote_their_slice():
    """Phase A block b writes H columns 32 b.. (its tile (32 b) // 64 in the packed buffer) and
    counts in at slice b // A_PER_SLICE; phase B's block of K slice s copies H tiles s KB..
    s KB + KB - 1 after A_PER_SLICE arrivals there. Those must be the same blocks."""
    for s in range(probe.SPLITS):
        writers = {b for b in range(probe.BLOCKS) if (32 * b) // 64 // probe.KB == s}
        counted = {b for b in range(probe.BLOCKS) if b // probe.A_PER_SLICE == s}
        assert writers == counted and len(writers) == probe.A_PER_SLICE
    source = probe.source(probe.Form(tps=2, flags=True))
    assert '#define FLAGS 1' in source and f'#define A_PER_SLICE {probe.A_PER_SLICE}' in source
    assert '#define FLAGS 0' in probe.source(probe.Form(tps=2))


def test_a_short_device_call_picks_its_forms_by_index(monkeypatch):
    monkeypatch.setenv('MLP_CHAIN_FORMS', '16, 21')
    picked = probe.chosen(probe.FORMS, 'MLP_CHAIN_FORMS')
    assert picked == [(16, probe.FORMS[16]), (21, probe.FORMS[21])]
    monkeypatch.delenv('MLP_CHAIN_FORMS')
    assert len(probe.chosen(probe.FORMS, 'MLP_CHAIN_FORMS')) == len(probe.FORMS)


def test_the_launchers_refuse_arguments_they_cannot_pass_before_any_launch():
    with pytest.raises(TypeError, match='str'):
        ptx.launch_cooperative(None, (1, 1, 1), (1, 1, 1), ['1.5'])
    with pytest.raises(TypeError, match='str'):
        ptx.launch_cluster(None, (2, 1, 1), (1, 1, 1), ['1.5'], 0, 2)
    with pytest.raises(ValueError, match='clusters of 4'):
        ptx.launch_cluster(None, (6, 1, 1), (1, 1, 1), [], 0, 4)
    values, array = ptx._kernel_arguments([7, 1.5])  # int as C int, float as C float
    assert (values[0].value, values[1].value, len(array)) == (7, 1.5, 2)


def test_the_cluster_launch_config_is_laid_out_as_cuda_h_declares_it():
    """CUlaunchAttribute is 72 bytes (id, padding, a 64-byte union at 8); CUlaunchConfig puts
    the stream at 32, the attributes at 40 and their count at 48 (cuda.h, CUDA 12 and 13)."""
    import ctypes
    assert ctypes.sizeof(ptx._LaunchAttribute) == 72
    assert ptx._LaunchAttribute.value.offset == 8
    assert (ptx._LaunchConfig.stream.offset, ptx._LaunchConfig.attrs.offset,
            ptx._LaunchConfig.num_attrs.offset, ctypes.sizeof(ptx._LaunchConfig)) == \
        (32, 40, 48, 56)
    config, attrs = ptx.launch_config((128, 1, 1), (128, 1, 1), 196608, 1234, 2)
    assert list(config.grid) == [128, 1, 1] and config.shared_mem == 196608
    assert config.stream == 1234 and config.num_attrs == 2
    assert [(a.id, a.value.cooperative) for a in attrs][0] == (2, 1)
    assert attrs[1].id == 4 and list(attrs[1].value.cluster_dim) == [2, 1, 1]
    with pytest.raises(ValueError, match='clusters of 3'):
        ptx.launch_cooperative(None, (128, 1, 1), (1, 1, 1), [], cluster=3)
    plain, attrs = ptx.launch_config((56, 1, 1), (128, 1, 1), 168960, 1234, 8,
                                     cooperative=False)  # clusters alone (launch_cluster)
    assert plain.num_attrs == 1 and len(attrs) == 1
    assert attrs[0].id == 4 and list(attrs[0].value.cluster_dim) == [8, 1, 1]


def stamped_chain(phase_marks, tile_marks) -> 'probe.Chain':
    """A Chain whose stamps buffer holds the same marks (ns from each layer's start, 10 us a
    layer) for every block and layer, as the kernel's STAMPS form writes them."""
    chain = probe.Chain.__new__(probe.Chain)  # no GPU here: only the stamps are read
    blocks, layers = probe.BLOCKS, probe.LAYERS
    start = (torch.arange(layers) * 10_000)[None, :, None]
    phases = (start[..., None] + torch.tensor(phase_marks)).expand(blocks, layers, 2, 3)
    tiles = (start + torch.tensor(tile_marks)).expand(blocks, layers, probe.TILES_PER_LAYER)
    chain.stamps = torch.cat([phases.flatten(), tiles.flatten()])
    return chain


def test_the_timeline_splits_a_layer_into_its_steps_and_traces_every_block():
    # phase A: start 0, MMAs done 3 us, epilogue ends 3.5; phase B: 4, 8, 9; next layer at 10
    tiles = [200 * i + 100 for i in range(probe.KA)] + [4000 + 500 * i for i in range(probe.KB)]
    timeline = stamped_chain([[0, 3000, 3500], [4000, 8000, 9000]], tiles).timeline()
    summary = timeline['summary']
    assert [summary[f'{step} us'] for step in probe.STEPS] == [3.0, 0.5, 0.5, 4.0, 1.0, 1.0]
    assert summary['layer us (block 0)'] == 10.0
    assert summary['k-tile ready us, phase A'][:3] == [0.1, 0.3, 0.5]
    assert summary['k-tile ready us, phase B'][:3] == [0.0, 0.5, 1.0]
    events = timeline['trace']['traceEvents']
    spans = [e for e in events if e['ph'] == 'X']
    assert len(spans) == probe.BLOCKS * probe.LAYERS * len(probe.STEPS)
    assert {e['args']['name'] for e in events if e['ph'] == 'M'} == \
        {f'block {b}' for b in range(probe.BLOCKS)}


@pytest.mark.parametrize('report_file', [
    'mlp_chain_probe_h200.json',
    'h200_mlp_chain_counters/mlp_chain_probe_counters_h200_run2.json'])
def test_the_committed_h200_report_is_drawn(tmp_path, report_file):
    with open(os.path.join(ROOT, 'bench', 'results', report_file)) as f:
        report = json.load(f)
    path = tmp_path / 'mlp_chain.png'
    probe.write_png(report, str(path))
    assert path.read_bytes()[:4] == b'\x89PNG' and path.stat().st_size > 10_000
