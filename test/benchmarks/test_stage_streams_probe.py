"""scripts/device/stage_streams_probe.py's reading of its traces, on the committed H200 ones:
which work ran on which stream, where the GPU idled, the picture."""

import os

from load_script import load_script

probe = load_script('scripts', 'device', 'stage_streams_probe.py')
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(ROOT, 'bench', 'results', 'h200_stage_streams')


def _rows(form):
    return probe.work_rows(os.path.join(RESULTS, f'trace_{form}.json.gz'))


def test_one_stream_replay_has_no_side_work_and_no_idle_moment():
    rows = _rows('one_stream')
    assert not rows['side'] and len(rows['capture']) > 2000
    assert [gap for gap in probe.idle_gaps(rows) if gap[0] > 100] == []


def test_two_stream_replay_splits_the_work_and_shows_its_stall():
    rows = _rows('side_stream_high_priority')
    assert len(rows['side']) > 1500 and len(rows['capture']) > 400
    end = {row: max(s + d for s, d in spans) for row, spans in rows.items()}
    side_start = min(s for s, _ in rows['side'])
    assert side_start < end['capture'] - 4000  # the expert began >4 ms before the prefix ended
    gaps = probe.idle_gaps(rows)
    assert any(length > 100 for _, length in gaps)  # the memset stall the README describes
    assert probe.idle_gaps(rows, at_least_us=1e6) == []


def test_timeline_is_drawn(tmp_path):
    for name in os.listdir(RESULTS):
        if name.startswith('trace_'):
            os.symlink(os.path.join(RESULTS, name), tmp_path / name)
    path = probe.draw(str(tmp_path))
    with open(path, 'rb') as f:
        assert f.read(4) == b'\x89PNG'
    assert os.path.getsize(path) > 10_000
