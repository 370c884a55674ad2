"""The host side of scripts/device/ingest_probe.py, without a GPU: the rates it reports from
the kernel's stamps, the tensor-map cases' layout and the check of what landed, and the tensor
maps' geometry (bench/hopper_ptx.py). (Its kernels compile for sm_90a in test_offline_cuda.py;
encoding a tensor map needs the driver, so that part runs on the device only.)"""

import pytest
import torch

from bench import hopper_ptx as ptx
from load_script import load_script

probe = load_script('scripts', 'device', 'ingest_probe.py')


def test_rates_come_from_the_median_block_and_the_launchs_span():
    # three blocks of 64 KB: 2, 4 and 8 us, starting 0, 1 and 1 us after the first
    starts = torch.tensor([0, 1000, 1000], dtype=torch.int64) + 10 ** 9
    ends = starts + torch.tensor([2000, 4000, 8000])
    stamps = torch.stack([starts, ends], 1).flatten()
    got = probe.summarize(stamps, 3, 64)
    assert got['block_us'] == 4.0
    assert got['gb_s_per_sm'] == round(65536 / 4000, 1)  # bytes per ns = GB/s
    assert got['aggregate_tb_s'] == round(3 * 65536 / 9000 / 1e3, 2)


def test_every_case_fits_the_shared_ring_and_the_source_buffer():
    for case in probe.CASES:
        assert case.blocks <= 132 and case.kb * 1024 % probe.BULK_BYTES == 0
        assert case.path in probe.PATHS and case.name.startswith(case.path)
    assert probe.SHARED % probe.BULK_BYTES == 0 and probe.SHARED <= 227 * 1024


def test_tensor_cases_fit_the_barriers_the_shared_ring_and_their_clusters():
    for case in probe.TENSOR_CASES:
        layout = probe.tensor_layout(case)
        assert layout['boxes'] * layout['box_rows'] == layout['rows'] <= probe.MAX_BOXES * 64
        assert layout['rows'] * probe.ROW_BYTES == case.kb * 1024 <= probe.SHARED
        assert case.blocks % layout['cluster'] == 0
        assert layout['matrix_rows'] * layout['cluster'] == layout['rows'] * case.blocks
    with pytest.raises(ValueError, match='boxes of 64'):
        probe.tensor_layout(probe.Case('tensor 32 KB', 56, 128, 16, True))  # 32 rows
    with pytest.raises(ValueError, match='clusters of 4'):
        probe.tensor_layout(probe.Case('tensor 32 KB multicast x4', 54, 128, 64, True))


def test_landed_bytes_are_checked_for_every_block_of_the_first_cluster():
    case = probe.Case('tensor 32 KB multicast x2', 56, 128, 64, True)
    layout = probe.tensor_layout(case)
    wide = torch.randn(layout['matrix_rows'], probe.PITCH // 2).to(torch.bfloat16)
    matrix = wide[:, :probe.ROW_BYTES // 2]  # strided rows, as on the device
    region = matrix[:layout['rows']].contiguous().view(torch.uint8).reshape(-1)
    check = torch.cat([region, region, torch.zeros(100, dtype=torch.uint8)])
    assert probe.landed_exact(check, matrix, layout)
    check[len(region) + 7] ^= 1  # one bit wrong in the second block's copy
    assert not probe.landed_exact(check, matrix, layout)


def test_tensor_map_geometry_is_the_drivers_view_of_a_strided_matrix():
    rows = torch.zeros(300, 2560, dtype=torch.bfloat16)[:, :256]  # 512-byte rows 5120 apart
    g = ptx.box_geometry(rows, 64, 256)
    assert g['dims'] == (256, 300) and g['pitch'] == 5120 and g['box'] == (256, 64)
    assert g['box_bytes'] == 32768 and g['dtype'] == 9  # CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
    for bad, reason in ((rows[:, :255], 'multiples of 16'), (rows.t(), 'unit column stride'),
                        (rows[:, :100], 'does not fit'), (rows.to(torch.int16), 'data type')):
        with pytest.raises(ValueError, match=reason):
            ptx.box_geometry(bad, 64, min(256, bad.shape[-1]) if reason != 'does not fit'
                             else 256)


def test_tensor_map_storage_is_64_byte_aligned_and_passed_by_address():
    maps = [ptx.TensorMap() for _ in range(8)]
    assert all(m.address % 64 == 0 for m in maps)
    values, array = ptx._kernel_arguments([maps[0], torch.zeros(1), 3])
    assert array[0] == maps[0].address and values[0] is maps[0]
