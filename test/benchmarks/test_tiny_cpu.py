"""bench/tiny_cpu.py runs on real pi05_tiny builds (as the spec is, without prompt lengths,
without passes) beside the eager policy, and writes its report and picture."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, 'bench', 'tiny_cpu.py')


def test_script_reports_every_build_and_the_eager_policy(tiny_artifact, tiny_variant, tmp_path):
    out = tmp_path / 'tiny_cpu.json'
    env = {**os.environ, 'PYTHONPATH': ROOT}
    builds = {'pi05_tiny': tiny_artifact, 'no_text_lengths': tiny_variant('one_length'),
              'no_passes': tiny_variant('no_passes')}
    subprocess.run([sys.executable, SCRIPT, '--runs', '2', '--sessions', '2', '--out', str(out),
                    *[f'--artifact={k}={v}' for k, v in builds.items()]],
                   check=True, env=env, cwd=ROOT, capture_output=True, timeout=300)
    report = json.loads(out.read_text())
    rows = report['prompts']
    assert [r['length']['pi05_tiny'] for r in rows.values()] == [48, 64, 96]
    for row in rows.values():
        assert row['length']['no_text_lengths'] == 96 and row['valid_tokens'] <= 96
        assert set(row['median_ms']) == {*builds, 'eager'}
        assert set(row['onnx_group_p50_ms']) == set(builds)
        assert row['ratio_to_pi05_tiny']['pi05_tiny'] == 1.0
        differences = row['max_abs_action_difference_from_pi05_tiny']
        assert differences['pi05_tiny'] == 0 and max(differences.values()) <= 1e-5
    assert set(report['peak_rss_mb']) == set(builds)
    assert all(v > 0 for v in report['peak_rss_mb'].values())
    assert (tmp_path / 'tiny_cpu.png').stat().st_size > 0


def test_unknown_or_incomplete_builds_are_refused(tmp_path):
    env = {**os.environ, 'PYTHONPATH': ROOT}
    done = subprocess.run([sys.executable, SCRIPT, '--artifact', 'no_passes=x'], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and 'pi05_tiny included' in done.stderr
