"""The committed H200 results of issue 9 hold together: the keys the issue names, figures that
agree with each other, parity inside the spec's tolerance, and the soak from the same artifact.

These files are measured on the GPU machine (bench/gpu_pi05.py, scripts/device/soak.py) and
committed with the code; this test reads them as they are, so a hand-edited number, a results
file from another build, or a missing key fails here rather than in a reader's head."""

import json
import math
from pathlib import Path

from lamp_ros.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / 'bench' / 'results'
ISSUE_KEYS = ('hf_eager_ms', 'torch_compile_ms', 'lamp_ms', 'roofline_ms', 'parity_max_rel_error')


def _load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text(encoding='utf-8'))


def test_the_bench_results_carry_the_issue_keys_and_agree_with_themselves():
    report = _load('gpu_pi05.json')
    for key in ISSUE_KEYS:
        value = report[key]
        assert isinstance(value, float) and math.isfinite(value) and value > 0, key
    median = report['median_ms']
    assert median['lamp'] == report['lamp_ms']
    assert median['torch_compile'] == report['torch_compile_ms']
    assert median['hf_eager'] == report['hf_eager_ms']
    for path, ratio in report['ratios_vs_lamp'].items():
        assert math.isclose(ratio, median[path] / report['lamp_ms'], rel_tol=1e-9), path
    assert math.isclose(report['pct_of_roofline'],
                        100 * report['roofline_ms'] / report['lamp_ms'], rel_tol=1e-9)
    for path, p99 in report['p99_ms'].items():
        assert p99 >= median[path], path
    assert not report['not_measured'], report['not_measured']


def test_the_bench_parity_is_inside_the_spec_tolerance():
    spec = load_spec(str(ROOT / 'config' / 'specs' / 'pi05_full.yaml'))
    assert _load('gpu_pi05.json')['parity_max_rel_error'] <= spec.parity['rtol']


def test_the_soak_ran_the_benched_artifact_for_two_minutes_without_a_miss():
    report, soak = _load('gpu_pi05.json'), _load('soak_pi05_full.json')
    assert soak['artifact_id'] == report['artifact_id']
    assert soak['seconds'] >= 120 and soak['rate_hz'] == 22.0
    assert soak['deadline_misses'] == 0 and soak['runtime_deadline_misses'] == 0
    assert soak['inference_errors'] == 0
    assert soak['ticks'] >= 0.99 * soak['seconds'] * soak['rate_hz']
