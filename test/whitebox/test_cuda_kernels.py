"""A cuda group's kernel table and timeline (`lamp profile` on a GPU machine) from torch-profiler
Chrome traces: a real one taken on the H200 (one whole inference of the pi05_full artifact,
bench/results/h200_kernel_timeline/) and one taken here by the CPU profiler.

The profiling itself (CudaGraphRunner.profile_kernels -> backends/cuda/kernel_trace.py) needs CUDA
and CUPTI, so it runs on the GPU machine only (scripts/device/profile_cuda_group.sh); what it
writes is read here exactly as `lamp profile` reads it."""

from pathlib import Path

import pytest
import torch

from lamp_ros.whitebox.op_profile import (busy_us, cuda_hint, cuda_kernel_table, gpu_events,
                                          read_trace, replays, time_by_name)
from lamp_ros.whitebox.plots import write_kernel_timeline

TRACE = (Path(__file__).resolve().parents[2] / 'bench' / 'results' / 'h200_kernel_timeline'
         / 'lamp_trace.json.gz')


@pytest.fixture(scope='module')
def h200_events():
    return gpu_events(read_trace(str(TRACE)))


def test_the_h200_trace_holds_every_kernel_of_the_graph_replays(h200_events):
    assert len(h200_events) > 1500  # ~1,600 launches an inference
    assert [e[2] for e in h200_events] == sorted(e[2] for e in h200_events)
    names = time_by_name(h200_events)
    assert {'_mqa_kernel', '_expert_gemm_kernel', '_premade_kernel'} <= set(names)
    assert names['_mqa_kernel'][1] == 180  # 18 expert layers x 10 Euler steps
    totals = [us for us, _ in names.values()]
    assert totals == sorted(totals, reverse=True)


def test_replays_are_cut_in_start_order_and_tabled_per_replay(h200_events):
    shift = h200_events[-1][2] + h200_events[-1][3] + 1000.0  # a second replay after the first
    twice = h200_events + [(n, s, t + shift, d) for n, s, t, d in h200_events]
    first, second = replays(twice, 2)
    assert first == h200_events and len(second) == len(h200_events)
    table = cuda_kernel_table(replays(twice, 2))
    once = cuda_kernel_table(replays(h200_events, 1))
    assert table['launches'] == once['launches'] == len(h200_events)
    assert table['kernel_ms'] == pytest.approx(once['kernel_ms'])
    assert table['span_ms'] == pytest.approx(once['span_ms'])
    mqa = {o['op_type']: o for o in table['ops']}['_mqa_kernel']
    assert mqa['calls'] == 180 and mqa['hint'] == 'compute-bound'
    assert sum(o['pct'] for o in table['ops']) == pytest.approx(100.0)
    with pytest.raises(ValueError, match='not 3 replays'):
        replays(twice[:-1], 3)


def test_busy_time_is_the_union_of_overlapping_intervals(h200_events):
    events = [('a', 1, 0.0, 10.0), ('b', 2, 5.0, 10.0), ('c', 1, 20.0, 5.0),
              ('d', 1, 21.0, 1.0)]
    assert busy_us(events) == 20.0  # [0, 15) and [20, 25)
    span = h200_events[-1][2] - h200_events[0][2]
    assert busy_us(h200_events) <= span + max(d for *_, d in h200_events)


def test_kernel_hints_name_the_matrix_kernels():
    assert cuda_hint('nvjet_sm90_tst_128x64_64x8_2x4_h_bz_bias_NNT') == 'compute-bound'
    assert cuda_hint('_premade_kernel') == 'compute-bound'
    assert cuda_hint('_norm_kernel') == 'memory-bound'
    assert cuda_hint('Memcpy HtoD (Pinned -> Device)') == 'memory-bound'


def test_the_kernel_timeline_is_drawn(h200_events, tmp_path):
    out = tmp_path / 'kernels.png'
    summary = write_kernel_timeline(h200_events, str(out), 'one inference')
    assert out.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    assert summary['gpu_events'] == len(h200_events)
    assert summary['busy_ms'] <= min(summary['span_ms'], summary['sum_ms']) + 1e-9


def test_a_trace_without_gpu_activity_is_refused_with_the_reason(tmp_path):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:  # the CPU profiler, for real
        torch.ones(64, 64) @ torch.ones(64, 64)
    path = tmp_path / 'cpu.json'
    prof.export_chrome_trace(str(path))
    with pytest.raises(ValueError, match='no GPU kernels'):
        gpu_events(read_trace(str(path)))


def test_the_trace_child_refuses_what_it_cannot_trace(tiny_artifact):
    """The child process for real, on the CPU artifact: it has no cuda group to replay, and
    this machine no GPU for a whole inference's kernels; each refusal names why."""
    from lamp_ros.whitebox.kernel_profile import trace
    with pytest.raises(ValueError, match=r"no cuda group 'g09_cuda'.*cuda groups: none"):
        trace(tiny_artifact, '/nonexistent/k.json', group='g09_cuda')
    with pytest.raises(ValueError, match='needs a CUDA GPU'):
        trace(tiny_artifact, '/nonexistent/k.json')
