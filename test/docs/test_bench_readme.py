"""bench/README.md: every command block as written (CPU benchmarks at the smoke sizes its
markers give, GPU blocks skipped with the reason), from a scratch copy of the repository.
`tiny_cpu.py` is handed its four builds (--artifact) from the suite's builds of the same edited
specs (test/docs/conftest.py TINY_CPU_BUILDS), which the suite makes anyway: its own build step,
the same edits compiled the same way, is test/benchmarks/test_tiny_cpu.py's. Then what
tiny_cpu.py reported: every build and the eager policy, at their prompt lengths, with the same
actions."""

import json
import os

BENCH_README = 'bench/README.md'
BUILDS = {'pi05_tiny', 'no_text_lengths', 'no_passes', 'prototype'}


def test_bench_commands_run_as_written_and_tiny_cpu_reports_every_build(doc_run):
    doc_run.document(BENCH_README)
    results = os.path.join(doc_run.root, 'bench', 'results')
    with open(os.path.join(results, 'tiny_cpu.json'), encoding='utf-8') as f:
        report = json.load(f)
    assert (report['runs'], report['sessions']) == (2, 1)
    rows = report['prompts']
    assert [r['length']['pi05_tiny'] for r in rows.values()] == [48, 64, 96]
    for row in rows.values():
        assert row['length']['no_text_lengths'] == 96 and row['valid_tokens'] <= 96
        assert set(row['median_ms']) == {*BUILDS, 'eager'}
        assert set(row['onnx_group_p50_ms']) == BUILDS
        assert row['ratio_to_pi05_tiny']['pi05_tiny'] == 1.0
        differences = row['max_abs_action_difference_from_pi05_tiny']
        assert differences['pi05_tiny'] == 0 and max(differences.values()) <= 1e-5
    assert set(report['peak_rss_mb']) == BUILDS
    assert all(v > 0 for v in report['peak_rss_mb'].values())
    assert os.path.getsize(os.path.join(results, 'tiny_cpu.png')) > 0
    with open(os.path.join(results, 'checkpoint_memory_cpu.json'), encoding='utf-8') as f:
        memory = json.load(f)
    assert memory['checkpoint'] == 'LeRobot tiny pi05 (smoke)'
    assert all(memory[k]['peak_rss_bytes'] > 0 for k in ('import', 'eager_load_bf16'))
