"""bench/text_lengths_cpu.py runs on the two real pi05_tiny builds (with and without
fusion.text_lengths) and writes its report and picture."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, 'bench', 'text_lengths_cpu.py')


def test_script_reports_every_prompt_at_its_length(tiny_artifact, tiny_variant, tmp_path):
    out = tmp_path / 'text_lengths_cpu.json'
    env = {**os.environ, 'PYTHONPATH': ROOT}
    subprocess.run([sys.executable, SCRIPT, '--runs', '2', '--sessions', '2',
                    '--with', tiny_artifact, '--without', tiny_variant('one_length'),
                    '--out', str(out)], check=True, env=env, cwd=ROOT, capture_output=True,
                   timeout=300)
    report = json.loads(out.read_text())
    rows = report['prompts']
    assert [r['length'] for r in rows.values()] == [48, 64, 96]
    for row in rows.values():
        assert row['valid_tokens'] <= row['length'] and row['full_length'] == 96
        assert set(row['median_ms']) == set(row['onnx_group_p50_ms']) == {'with', 'without'}
        assert all(len(v) == 2 for v in row['onnx_group_p50_ms_per_session'].values())
        assert row['ratio_without_over_with'] > 0
        assert row['max_abs_action_difference'] <= 1e-5
    assert set(report['peak_rss_mb']) == {'with', 'without'}
    assert all(v > 0 for v in report['peak_rss_mb'].values())
    assert (tmp_path / 'text_lengths_cpu.png').stat().st_size > 0
