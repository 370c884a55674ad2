"""bench/expert_budget.py: what a target time leaves the expert's tail, from the committed H200
trace of one inference of the run of record (bench/results/h200_record_1203/) and from traces
made here with known numbers."""

import json

import pytest

from bench.expert_budget import (MLP_PROBE, TRACE, best_mlp_half_us, budget_chart,
                                 expert_budget, weight_mb_per_layer_step)
from lamp_ros.whitebox.ops import read_trace

PNG_MAGIC = b'\x89PNG\r\n\x1a\n'


def _trace(events):
    """A torch-profiler Chrome trace of GPU kernels: (name, stream, start us, us) each."""
    return {'traceEvents': [{'ph': 'X', 'cat': 'kernel', 'name': n, 'ts': s, 'dur': d,
                             'tid': st, 'args': {'stream': st}} for n, st, s, d in events]}


def test_the_run_of_records_tail_is_step_ones_last_layer_and_nine_steps():
    budget = expert_budget(read_trace(str(TRACE)), 9.0)
    assert budget.tail_layer_steps == 9 * 18 + 1
    assert 5.0 < budget.before_ms < 8.0            # vision, prefix and step 1 beside it
    assert budget.after_ms < 0.1                   # the outputs' copies
    assert budget.before_ms + budget.tail_ms + budget.after_ms == pytest.approx(budget.span_ms)
    # the budget is what the target leaves, shared by the tail's layer-steps
    assert (budget.before_ms + budget.after_ms + budget.tail_layer_steps
            * budget.budget_us_per_layer_step / 1e3) == pytest.approx(9.0)
    assert budget.budget_us_per_layer_step < budget.us_per_layer_step
    assert budget.speedup_needed == pytest.approx(
        budget.us_per_layer_step / budget.budget_us_per_layer_step)
    assert budget.floor_ms == pytest.approx(
        budget.before_ms + budget.after_ms
        + budget.tail_layer_steps * budget.weight_bound_us_per_layer_step / 1e3)


def test_one_expert_layers_weights_are_the_published_34_6_mb():
    # q 1024x2048, k and v 1024x256 each, o 2048x1024, gate and up 1024x4096, down 4096x1024
    params = 1024 * 2048 + 2 * 1024 * 256 + 2048 * 1024 + 3 * 1024 * 4096
    assert weight_mb_per_layer_step() == pytest.approx(params * 2 / 1e6)


def test_the_tail_is_the_stream_with_the_most_attentions_and_the_arithmetic_is_exact():
    attn, gemm = '_mqa_kernel', '_expert_gemm_kernel'
    events = [('vision', 1, 0.0, 1000.0), ('prefix', 1, 1000.0, 2000.0),
              (attn, 2, 1500.0, 10.0), (gemm, 2, 1510.0, 10.0),      # step 1 beside the prefix
              (attn, 3, 3000.0, 10.0), (gemm, 3, 3010.0, 20.0),      # the tail: 3 layer-steps
              (attn, 3, 3030.0, 10.0), (gemm, 3, 3040.0, 20.0),
              (attn, 3, 3060.0, 10.0), (gemm, 3, 3070.0, 20.0),
              ('copy', 1, 3095.0, 5.0)]
    budget = expert_budget(_trace(events), target_ms=3.09, weight_mb=4.3)
    assert budget.tail_layer_steps == 3
    assert budget.before_ms == pytest.approx(3.0)
    assert budget.tail_ms == pytest.approx(0.09)
    assert budget.after_ms == pytest.approx(0.01)
    assert budget.us_per_layer_step == pytest.approx(30.0)
    assert budget.budget_us_per_layer_step == pytest.approx(80.0 / 3)  # (3090 - 3000 - 10) / 3
    assert budget.weight_bound_us_per_layer_step == pytest.approx(1.0)  # 4.3 MB at 4.3 TB/s
    assert budget.floor_ms == pytest.approx(3.013)


def test_a_target_below_the_rest_of_the_inference_leaves_a_negative_budget():
    events = [('prefix', 1, 0.0, 2000.0), ('_mqa_kernel', 2, 2000.0, 10.0)]
    budget = expert_budget(_trace(events), target_ms=1.0, weight_mb=1.0)
    assert budget.budget_us_per_layer_step < 0
    assert budget.speedup_needed == float('inf')


def test_a_trace_without_the_attention_kernel_is_refused_by_name():
    with pytest.raises(ValueError, match='_mqa_kernel'):
        expert_budget(_trace([('prefix', 1, 0.0, 10.0)]), 9.0)


def test_the_best_persistent_mlp_half_is_read_from_the_probe_report():
    report = json.loads(MLP_PROBE.read_text(encoding='utf-8'))
    assert best_mlp_half_us(report) == pytest.approx(14.59)
    with pytest.raises(ValueError, match='mlp_chain'):
        best_mlp_half_us({'torch ops, one CUDA graph': {'us_per_layer': 42.0}})


def test_the_budget_chart_is_a_png(tmp_path):
    out = tmp_path / 'budget.png'
    budget_chart(expert_budget(read_trace(str(TRACE)), 9.0), str(out))
    assert out.read_bytes()[:8] == PNG_MAGIC
