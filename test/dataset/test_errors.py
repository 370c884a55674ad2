"""`lamp dataset` refuses what it cannot write, with an error that says why, and leaves no
half-written dataset behind."""

import os

import numpy as np
import pytest

from lamp_ros.cli import main
from lamp_ros.dataset import sample_bag
from lamp_ros.regress.bag import BagWriter, read_bag, TYPESTORE


def _run(capsys, *args) -> tuple:
    code = main(['dataset', *args])
    captured = capsys.readouterr()
    return code, captured.err


def _copy(src: str, dst: str, keep=lambda m: True, change=lambda m: m) -> str:
    writer = BagWriter(dst)
    for m in read_bag(src):
        if keep(m):
            m = change(m)
            writer.write(m.topic, m.msgtype, m.t_ns, m.raw)
    writer.close()
    return dst


@pytest.fixture
def bag(tmp_path):
    path = str(tmp_path / 'good')
    sample_bag.write_sample_bag(path, frames=6)
    return path


def test_a_bag_without_commands_is_refused(tmp_path, capsys, bag):
    no_commands = _copy(bag, str(tmp_path / 'nocmd'),
                        keep=lambda m: 'joint_trajectory' not in m.topic)
    code, err = _run(capsys, no_commands, '--out', str(tmp_path / 'out'))
    assert code == 2
    assert 'no command topic (/vla_policy/commands or /vla_policy/joint_trajectory)' in err
    assert not os.path.exists(tmp_path / 'out')


def test_bags_of_different_joints_are_refused(tmp_path, capsys, bag):
    other = str(tmp_path / 'other')
    sample_bag.write_sample_bag(other, frames=6, joints=('a', 'b', 'c'))
    code, err = _run(capsys, bag, other, '--out', str(tmp_path / 'out'))
    assert code == 2
    assert "joint names differ between bags" in err and "['a', 'b', 'c']" in err
    assert not os.path.exists(tmp_path / 'out')


def test_an_empty_bag_is_refused(tmp_path, capsys):
    empty = str(tmp_path / 'empty')
    BagWriter(empty).close()
    code, err = _run(capsys, empty, '--out', str(tmp_path / 'out'))
    assert code == 2 and 'the bag holds no messages' in err


def test_a_missing_bag_is_refused(tmp_path, capsys):
    code, err = _run(capsys, str(tmp_path / 'nowhere'), '--out', str(tmp_path / 'out'))
    assert code == 2 and 'no such rosbag2 directory' in err


def test_an_existing_output_is_refused_before_reading_the_bags(tmp_path, capsys, bag):
    out = tmp_path / 'out'
    out.mkdir()
    (out / 'keep.txt').write_text('mine')
    code, err = _run(capsys, bag, '--out', str(out))
    assert code == 2 and 'exists and is not empty' in err
    assert os.listdir(out) == ['keep.txt']
    empty = tmp_path / 'empty_out'
    empty.mkdir()
    assert _run(capsys, bag, '--out', str(empty))[0] == 0   # an empty folder is fine
    assert os.path.isfile(empty / 'meta' / 'info.json')


def test_a_bag_without_a_prompt_needs_task(tmp_path, capsys):
    path = str(tmp_path / 'noprompt')
    sample_bag.write_sample_bag(path, frames=4, prompt=None)
    code, err = _run(capsys, path, '--out', str(tmp_path / 'out'))
    assert code == 2 and 'give --task TEXT' in err
    assert _run(capsys, path, '--out', str(tmp_path / 'out'), '--task', 'x')[0] == 0


def test_bags_at_different_rates_need_fps(tmp_path, capsys, bag):
    fast = str(tmp_path / 'fast')
    sample_bag.write_sample_bag(fast, frames=6, rate_hz=20.0)
    code, err = _run(capsys, bag, fast, '--out', str(tmp_path / 'out'))
    assert code == 2 and 'command rates round differently' in err and 'give --fps' in err
    assert _run(capsys, bag, fast, '--out', str(tmp_path / 'out'), '--fps', '10')[0] == 0


def test_a_camera_that_changes_size_midway_leaves_no_dataset(tmp_path, capsys, bag):
    """Found while writing (the check reads only each camera's first frame): what was
    written is removed."""
    def shrink(m):
        if m.topic.endswith('/base/image_raw') and m.t_ns > sample_bag.EPOCH_NS + 3 * 10**8:
            msg = m.decode()
            small = sample_bag._image_msg(np.zeros((6, 8, 3), np.uint8), m.t_ns, False)
            small.header = msg.header
            return type(m)(m.topic, m.msgtype, m.t_ns,
                           TYPESTORE.serialize_cdr(small, m.msgtype))
        return m
    resized = _copy(bag, str(tmp_path / 'resized'), change=shrink)
    code, err = _run(capsys, bag, resized, '--out', str(tmp_path / 'out'))
    assert code == 2 and 'camera base: frame 4 is 8x6' in err
    assert not os.path.exists(tmp_path / 'out')
