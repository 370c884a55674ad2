"""The host side of scripts/device/ingest_probe.py, without a GPU: the rates it reports from
the kernel's stamps. (Its kernel compiles for sm_90a in test_offline_cuda.py.)"""

import torch

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
