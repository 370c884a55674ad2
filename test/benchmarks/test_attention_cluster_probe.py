"""The host side of scripts/device/attention_cluster_probe.py, without a GPU: its forms fit an
H200 block's shared memory, and its timeline reads the kernel's phase stamps as they are laid
out. (That every form compiles for sm_90a without spilling is test_offline_cuda.py's; that it
computes the reference's numbers was measured on the H200, bench/results/.)"""

import torch

from load_script import load_script

probe = load_script('scripts', 'device', 'attention_cluster_probe.py')
H200_SHARED_PER_BLOCK = 227 * 1024  # bytes a block may have on the H200 (sm_90)


def test_every_form_fits_one_block_of_shared_memory_per_sm():
    for form in probe.FORMS:
        static = 2 * 4 * form.rows  # the kernel's m_s and l_s
        assert form.shared + static <= H200_SHARED_PER_BLOCK, form.name
        # the partial outputs reuse the chunk buffers, so they must fit in them
        assert form.rows * probe.OS * 4 <= probe.NBUF * 2 * probe.BN * probe.QS * 2
        assert (probe.D // form.cluster) % 4 == 0  # each block's column slice, in float4s


def test_the_timeline_gives_each_phase_per_split_and_the_span():
    form = probe.Form(4, 8)
    att = probe.ClusterAttention.__new__(probe.ClusterAttention)  # no GPU: only stamps are read
    att.form = form
    blocks = 2 * form.cluster
    steps = torch.arange(1, len(probe.STAMP_NAMES), dtype=torch.int64) * 1000  # ns
    marks = torch.cat([torch.zeros(1, dtype=torch.int64), steps.cumsum(0)])
    stamps = torch.zeros(blocks, 16, dtype=torch.int64)
    stamps[:, :len(marks)] = marks + 5_000_000
    stamps[form.cluster - 1::form.cluster, 2:len(marks)] += 500  # own-key split: 0.5 us later
    att.stamps = stamps.flatten()
    got = att.timeline(blocks)
    assert got['start_skew_us'] == 0.0
    assert got['span_us'] == round((int(marks[-1]) + 500) / 1e3, 2)
    names = probe.STAMP_NAMES[1:]
    assert list(got['other splits']) == list(names)
    assert [got['other splits'][n] for n in names] == [float(i) for i in range(1, len(marks))]
    own = [got['own-key split'][n] for n in names]
    assert own[1] == 2.5 and own[0] == 1.0 and own[2:] == [float(i) for i in range(3, len(marks))]
