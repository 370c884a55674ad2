"""The issue-9 bench's pictures from the committed H200 files: the paths chart of the results
file of record and the kernel timeline of a real profiler trace of one inference
(bench/results/h200_kernel_timeline/, taken by bench/gpu_pi05.py --trace-out on the H200)."""

import json
from pathlib import Path

import pytest
import torch

from bench.gpu_pi05_plots import (busy_us, gpu_events, kernel_timeline, paths_chart, read_trace,
                                  time_by_name)

RESULTS = Path(__file__).resolve().parents[2] / 'bench' / 'results'
TRACE = RESULTS / 'h200_kernel_timeline' / 'lamp_trace.json.gz'
PNG_MAGIC = b'\x89PNG\r\n\x1a\n'


def test_the_paths_chart_draws_the_results_file_of_record(tmp_path):
    report = json.loads((RESULTS / 'gpu_pi05.json').read_text(encoding='utf-8'))
    out = tmp_path / 'paths.png'
    paths_chart(report, str(out))
    assert out.read_bytes()[:8] == PNG_MAGIC


def test_the_kernel_timeline_reads_the_h200_trace_of_one_inference(tmp_path):
    trace = read_trace(str(TRACE))
    events = gpu_events(trace)
    kernels = [e for e in trace['traceEvents'] if e.get('cat') == 'kernel']
    assert len(events) >= len(kernels) > 1500  # the artifact launches ~1,600 a call
    assert [e[2] for e in events] == sorted(e[2] for e in events)
    names = time_by_name(events)
    assert {'_mqa_kernel', '_expert_gemm_kernel', '_premade_kernel'} <= set(names)
    assert names['_mqa_kernel'][1] == 180  # 18 expert layers x 10 Euler steps
    out = tmp_path / 'timeline.png'
    summary = kernel_timeline(trace, str(out))
    assert out.read_bytes()[:8] == PNG_MAGIC
    # the union of the intervals is no longer than the span, nor than the summed durations
    assert summary['busy_ms'] <= summary['span_ms'] + 1e-9
    assert summary['busy_ms'] <= summary['sum_ms'] + 1e-9
    assert summary['gpu_events'] == len(events)


def test_busy_time_is_the_union_of_overlapping_intervals():
    events = [('a', 1, 0.0, 10.0), ('b', 2, 5.0, 10.0), ('c', 1, 20.0, 5.0),
              ('d', 1, 21.0, 1.0)]
    assert busy_us(events) == 20.0  # [0, 15) and [20, 25)


def test_a_trace_without_gpu_activity_is_refused_with_the_reason(tmp_path):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:  # the CPU profiler, for real
        torch.ones(64, 64) @ torch.ones(64, 64)
    path = tmp_path / 'cpu.json'
    prof.export_chrome_trace(str(path))
    with pytest.raises(ValueError, match='no GPU kernels'):
        gpu_events(read_trace(str(path)))
