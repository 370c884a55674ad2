"""Documented commands work as written: `lamp sim --ros-args ...` (and `lamp sim -- --ros-args`),
its help names files that exist, output folders are made (and checked before the long work,
so a run's results are never lost to a missing folder), and `lamp trace` shows its progress
off a terminal."""

import os
import re
import subprocess
import sys

import pytest

from lamp_ros.cli import main as lamp, output_path, split_ros_args

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_ros_arguments_are_split_off_as_written():
    assert split_ros_args(['sim', '--ros-args', '-p', 'artifact:=a']) == (
        ['sim'], ['--ros-args', '-p', 'artifact:=a'])
    assert split_ros_args(['sim', '--', '--ros-args', '-p', 'x:=1']) == (
        ['sim'], ['--ros-args', '-p', 'x:=1'])
    assert split_ros_args(['sim']) == (['sim'], [])
    assert split_ros_args(['run', 'artifacts/a', '--ticks', '5']) == (
        ['run', 'artifacts/a', '--ticks', '5'], [])


def test_only_lamp_sim_takes_ros_arguments(capsys):
    with pytest.raises(SystemExit) as exit_:
        lamp(['run', 'artifacts/none', '--ros-args', '-p', 'x:=1'])
    assert exit_.value.code == 2
    assert 'only lamp sim takes ROS arguments' in capsys.readouterr().err


def test_lamp_sim_help_names_files_that_exist(capsys):
    with pytest.raises(SystemExit):
        lamp(['sim', '--help'])
    text = capsys.readouterr().out
    assert '--ros-args -p artifact:=' in text
    named = re.findall(r'(?:config|lamp_ros|docs)/[\w/.-]+\.(?:yaml|py|md)', text)
    assert named, text
    for path in named:
        assert os.path.exists(os.path.join(ROOT, path)), path


def test_output_path_makes_the_folder_and_refuses_what_cannot_be_written(tmp_path):
    out = tmp_path / 'a' / 'b' / 'report.json'
    assert output_path(str(out), '--out') == str(out) and out.parent.is_dir()
    with pytest.raises(ValueError, match='is a folder'):
        output_path(str(tmp_path / 'a'), '--out')
    (tmp_path / 'plain_file').write_text('')
    with pytest.raises(ValueError, match='cannot create the folder'):
        output_path(str(tmp_path / 'plain_file' / 'report.json'), '--out')


def test_lamp_eval_creates_its_out_folder(act_small_artifact, tmp_path, capsys):
    out = tmp_path / 'eval' / 'new' / 'expert.json'
    assert lamp(['eval', act_small_artifact, '--expert', '--episodes', '1', '--seconds', '2',
                 '--out', str(out)]) == 0
    assert out.stat().st_size > 0 and (out.parent / 'expert.png').stat().st_size > 0
    assert f'wrote {out}' in capsys.readouterr().out


def test_lamp_eval_refuses_an_out_it_cannot_write_before_any_episode(
        act_small_artifact, tmp_path, capsys):
    (tmp_path / 'plain_file').write_text('')
    out = tmp_path / 'plain_file' / 'eval.json'
    assert lamp(['eval', act_small_artifact, '--expert', '--episodes', '50', '--out',
                 str(out)]) == 2
    captured = capsys.readouterr()
    assert 'lamp eval: error: --out' in captured.err and 'cannot create the folder' in \
        captured.err
    assert captured.out == ''  # not one episode ran


def test_lamp_trace_shows_progress_off_a_terminal(tmp_path):
    out = tmp_path / 'graphs' / 'point_reach.json'
    result = subprocess.run([sys.executable, '-m', 'lamp_ros.cli', 'trace',
                             'config/specs/point_reach.yaml', '--out', str(out), '--no-export'],
                            capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert re.search(r'^\s*\d+\.\ds tracing point_reach$', result.stderr, re.M), result.stderr
    assert out.stat().st_size > 0
