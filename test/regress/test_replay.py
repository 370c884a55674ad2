"""Rosbag regression: the committed bag through a fresh artifact, changes caught and localised,
mcap and sqlite3, damaged bags, golden files."""

import json
import os
import shutil

import pytest

from lamp_ros.cli import main
from lamp_ros.regress.bag import BagError, BagWriter, read_bag
from lamp_ros.regress.replay import localize, replay
from conftest import DEMO_SPEC

BAG = 'test/data/pi05_tiny_sim'


def _replay_json(capsys, *args) -> tuple:
    code = main(['replay', *args, '--json'])
    return code, json.loads(capsys.readouterr().out)


def test_committed_bag_passes_against_a_fresh_artifact(demo_artifact, capsys):
    """The bag was recorded with the demo policy (scripts/make_regression_bag.py)."""
    code, report = _replay_json(capsys, BAG, '--artifact', demo_artifact)
    assert code == 0
    assert {'passed', 'max_abs_error', 'within_tolerance_pct', 'messages'} <= set(report)
    assert report['passed'] and report['within_tolerance_pct'] == 100.0
    assert report['messages'] == 66 and report['max_abs_error'] <= 1e-5


def test_changed_interpolation_is_caught_and_localised(tiny_variant, demo_artifact, capsys):
    area = tiny_variant('area', DEMO_SPEC)
    code, report = _replay_json(capsys, BAG, '--artifact', area)
    assert code == 1 and not report['passed']
    assert report['first_failure'] is not None and report['within_tolerance_pct'] < 100
    code, where = _replay_json(capsys, BAG, '--artifact', demo_artifact, '--against', area)
    assert code == 1 and where['diverged']
    assert where['node'] == 'preprocess_image.base' and where['tick'] == 0
    assert where['mismatches'] > 0 and where['max_abs'] >= 1  # uint8 pixels: levels apart


def test_identical_artifacts_do_not_diverge(demo_artifact):
    report = localize(BAG, demo_artifact, demo_artifact)
    assert not report['diverged'] and report['ticks'] == 66
    assert report['values_compared'] > 66


def test_sqlite3_bag_works_too(demo_artifact, tmp_path):
    out = str(tmp_path / 'sqlite_bag')
    writer = BagWriter(out, 'sqlite3')
    for m in read_bag(BAG):
        writer.write(m.topic, m.msgtype, m.t_ns, m.raw)
    writer.close()
    assert any(name.endswith('.db3') for name in os.listdir(out))
    report = replay(out, demo_artifact)
    assert report['passed'] and report['messages'] == 66


def test_truncated_bag_is_a_clear_error(tmp_path, demo_artifact):
    broken = tmp_path / 'broken'
    shutil.copytree(BAG, broken)
    mcap = next(p for p in broken.iterdir() if p.suffix == '.mcap')
    os.truncate(mcap, mcap.stat().st_size // 3)
    with pytest.raises(BagError, match='cannot read the bag.*truncated or corrupt'):
        replay(str(broken), demo_artifact)


def test_bag_without_a_camera_topic_is_a_clear_error(tmp_path, demo_artifact, capsys):
    out = str(tmp_path / 'no_base')
    writer = BagWriter(out)
    for m in read_bag(BAG):
        if 'base' not in m.topic:
            writer.write(m.topic, m.msgtype, m.t_ns, m.raw)
    writer.close()
    with pytest.raises(BagError, match=r"no camera topic \['/camera/base/image_raw'\]"):
        replay(out, demo_artifact)
    assert main(['replay', out, '--artifact', demo_artifact]) == 2
    assert 'no camera topic' in capsys.readouterr().err


def test_golden_round_trip(demo_artifact, tmp_path, capsys):
    golden = str(tmp_path / 'golden.json')
    assert main(['replay', BAG, '--artifact', demo_artifact, '--save-golden', golden]) == 0
    capsys.readouterr()
    code, report = _replay_json(capsys, BAG, '--artifact', demo_artifact, '--golden', golden)
    assert code == 0 and report['passed'] and report['messages'] == 66
