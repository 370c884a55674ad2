"""The issue-9 bench's pictures from the committed H200 files: the paths chart of the results
file of record and the kernel timeline of a real profiler trace of one inference
(bench/results/h200_kernel_timeline/, taken by bench/gpu_pi05.py --trace-out on the H200)."""

import json
from pathlib import Path

from bench.gpu_pi05_plots import kernel_timeline, paths_chart
from lamp_ros.whitebox.op_profile import read_trace

RESULTS = Path(__file__).resolve().parents[2] / 'bench' / 'results'
TRACE = RESULTS / 'h200_kernel_timeline' / 'lamp_trace.json.gz'
PNG_MAGIC = b'\x89PNG\r\n\x1a\n'


def test_the_paths_chart_draws_the_results_file_of_record(tmp_path):
    report = json.loads((RESULTS / 'gpu_pi05.json').read_text(encoding='utf-8'))
    out = tmp_path / 'paths.png'
    paths_chart(report, str(out))
    assert out.read_bytes()[:8] == PNG_MAGIC


def test_the_kernel_timeline_of_one_whole_inference(tmp_path):
    trace = read_trace(str(TRACE))
    out = tmp_path / 'timeline.png'
    summary = kernel_timeline(trace, str(out))
    assert out.read_bytes()[:8] == PNG_MAGIC
    assert summary['gpu_events'] > 1500  # the artifact launches ~1,600 a call
    # the union of the intervals is no longer than the span, nor than the summed durations
    assert summary['busy_ms'] <= summary['span_ms'] + 1e-9
    assert summary['busy_ms'] <= summary['sum_ms'] + 1e-9
