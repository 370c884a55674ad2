"""`lamp run` and `lamp bench` on a compiled artifact."""

import json

from lamp_ros.cli import main


def test_lamp_run_prints_a_profile_and_writes_a_trace(tiny_artifact, tmp_path, capsys):
    trace = tmp_path / 'run.json'
    assert main(['run', tiny_artifact, '--ticks', '5', '--fast', '--trace', str(trace)]) == 0
    out = capsys.readouterr().out
    assert 'tick' in out and 'g03_onnxruntime' in out and 'deadline misses' in out
    assert json.loads(trace.read_text())['traceEvents']


def test_lamp_bench_json_side_by_side(tiny_artifact, capsys):
    assert main(['bench', tiny_artifact, '--runs', '3', '--json']) == 0
    result = json.loads(capsys.readouterr().out)
    assert {'reference_ms', 'runtime_ms', 'speedup', 'groups_ms'} <= set(result)
    assert result['speedup'] == result['reference_ms'] / result['runtime_ms']
    assert set(result['groups_ms']) >= {'g03_onnxruntime', 'g05_host'}
