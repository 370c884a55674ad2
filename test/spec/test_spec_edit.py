"""A spec edited or copied elsewhere keeps the files it names (lamp_ros/spec/edit.py), and a
copy that loses them is refused with the path it tried and why."""

import shutil

import pytest

from lamp_ros.spec import edited_spec, load_spec, spec_data, SpecError, write_spec

SPEC = 'config/specs/pi05_tiny_random.yaml'   # names its robot file by a relative path


def test_an_edited_spec_parsed_in_memory_reads_the_originals_files():
    spec = edited_spec(SPEC, lambda d: d['fusion'].update(text_lengths=[]))
    assert spec.fusion['text_lengths'] == []
    assert spec.robot == load_spec(SPEC).robot
    assert spec.source == SPEC


def test_a_copy_written_elsewhere_keeps_its_files(tmp_path):
    data = spec_data(SPEC)
    data['name'] = 'copied'
    copy = load_spec(write_spec(data, str(tmp_path / 'deeper' / 'copied.yaml')))
    assert copy.robot == load_spec(SPEC).robot and copy.name == 'copied'


def test_a_plain_copy_says_where_its_relative_robot_file_was_looked_for(tmp_path):
    shutil.copy(SPEC, tmp_path / 'spec.yaml')
    with pytest.raises(SpecError, match=r"robot.file: no file .*sim7.yaml \(\.\./robots/sim7.yaml "
                                        r"is read relative to the spec's folder"):
        load_spec(str(tmp_path / 'spec.yaml'))


def test_a_checkpoint_spec_copied_elsewhere_keeps_checkpoint_and_tokenizer(tmp_path):
    source = tmp_path / 'specs'
    source.mkdir()
    shutil.copytree('test/data/checkpoints/lerobot_pi05_tiny', tmp_path / 'ckpt')
    shutil.copy('test/data/checkpoints/tokenizer.model', tmp_path / 'tokenizer.model')
    write_spec({**spec_data(SPEC), 'name': 'imported',
                'weights': {'format': 'lerobot', 'path': '../ckpt'},
                'policy': {'entry': 'lamp_ros.policies.pi05.pipeline:pipeline_from_spec',
                           'options': {'preset': 'from_weights',
                                       'tokenizer': {'path': '../tokenizer.model'}}}},
               str(source / 'imported.yaml'))
    data = spec_data(str(source / 'imported.yaml'))
    assert data['weights']['path'] == str(tmp_path / 'ckpt')
    assert data['policy']['options']['tokenizer']['path'] == str(tmp_path / 'tokenizer.model')
    assert data['robot']['file'].endswith('config/robots/sim7.yaml')
