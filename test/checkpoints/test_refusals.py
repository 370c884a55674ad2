"""Checkpoints lamp cannot deploy exactly are refused with the file and the reason, never
imported into a silently wrong artifact. Each case is the tiny upstream fixture
(test/data/checkpoints) with one thing broken."""

import io
import json
import os
import shutil

import numpy as np
from safetensors.numpy import load_file, save_file
import sentencepiece as spm

from conftest import CHECKPOINT_FOLDERS, CHECKPOINTS
from lamp_ros.cli import main as lamp

TOKENIZER = os.path.join(CHECKPOINTS, 'tokenizer.model')
WEIGHTS = 'model.safetensors'


def copy(fmt: str, tmp_path) -> str:
    folder = str(tmp_path / CHECKPOINT_FOLDERS[fmt])
    shutil.copytree(os.path.join(CHECKPOINTS, CHECKPOINT_FOLDERS[fmt]), folder)
    return folder


def edit_json(path: str, change) -> None:
    with open(path, encoding='utf-8') as f:
        data = json.load(f)
    change(data)
    with open(path, 'w', encoding='utf-8') as f:
        json.dump(data, f)


def edit_tensors(path: str, change) -> None:
    tensors = load_file(path)
    change(tensors)
    save_file(tensors, path)


def refused(capsys, *args) -> str:
    """Run `lamp ARGS`; it must fail cleanly (exit 2, no traceback): return its message."""
    assert lamp(list(args)) == 2
    err = capsys.readouterr().err
    assert 'Traceback' not in err
    return err


def import_message(capsys, folder, tokenizer=TOKENIZER, *extra) -> str:
    return refused(capsys, 'import', folder, '--tokenizer', tokenizer, '--out',
                   os.path.join(os.path.dirname(folder), 'spec.yaml'), *extra)


def compile_message(capsys, folder) -> str:
    spec = os.path.join(os.path.dirname(folder), 'spec.yaml')
    assert lamp(['import', folder, '--tokenizer', TOKENIZER, '--out', spec]) == 0
    capsys.readouterr()
    return refused(capsys, 'compile', spec, '--out', os.path.join(os.path.dirname(folder), 'a'))


def test_pi0_config_is_refused(tmp_path, capsys):
    folder = copy('lerobot', tmp_path)
    edit_json(os.path.join(folder, 'config.json'), lambda d: d.update(type='pi0'))
    msg = import_message(capsys, folder)
    assert "type 'pi0'" in msg and 'pi0 is a different model' in msg


def test_pi0_tensors_are_refused(tmp_path, capsys):
    folder = copy('openpi', tmp_path)
    edit_tensors(os.path.join(folder, WEIGHTS), lambda t: t.update(
        {'state_proj.weight': np.zeros((48, 32), np.float32)}))
    assert 'this is a pi0 checkpoint' in import_message(capsys, folder)


def test_missing_stats_are_refused(tmp_path, capsys):
    folder = copy('lerobot', tmp_path)
    stats = os.path.join(folder, 'policy_preprocessor_step_3_normalizer_processor.safetensors')
    edit_tensors(stats, lambda t: [t.pop(k) for k in list(t)
                                   if k.startswith('observation.state.')])
    msg = import_message(capsys, folder)
    assert 'observation.state' in msg and "missing or empty: ['q01', 'q99']" in msg


def test_empty_stats_are_refused(tmp_path, capsys):
    folder = copy('openpi', tmp_path)
    edit_json(os.path.join(folder, 'assets', 'tiny_arm', 'norm_stats.json'),
              lambda d: d['norm_stats'].update(state={}))
    assert 'norm_stats.state and norm_stats.actions are needed' in import_message(capsys, folder)


def test_unknown_processor_step_is_refused(tmp_path, capsys):
    folder = copy('lerobot', tmp_path)
    edit_json(os.path.join(folder, 'policy_preprocessor.json'), lambda d: d['steps'].insert(
        2, {'registry_name': 'my_image_crop', 'config': {}}))
    msg = import_message(capsys, folder)
    assert "unknown processor step 'my_image_crop'" in msg and 'policy_preprocessor.json' in msg


def test_relative_actions_are_refused(tmp_path, capsys):
    folder = copy('lerobot', tmp_path)
    edit_json(os.path.join(folder, 'config.json'), lambda d: d.update(use_relative_actions=True))
    assert 'use_relative_actions is on' in import_message(capsys, folder)


def test_a_tokenizer_of_another_vocabulary_is_refused(tmp_path, capsys):
    writer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(['pick up the red cube', 'place it in the bowl'] * 50),
        model_writer=writer, model_type='bpe', vocab_size=300, byte_fallback=True,
        minloglevel=2)
    other = tmp_path / 'other.model'
    other.write_bytes(writer.getvalue())
    msg = import_message(capsys, copy('lerobot', tmp_path), str(other))
    assert '300 pieces, the checkpoint\'s embedding has 512 rows' in msg
    assert 'google/paligemma-3b-pt-224' in msg


def test_wrong_number_of_joint_names_is_refused(tmp_path, capsys):
    msg = import_message(capsys, copy('lerobot', tmp_path), TOKENIZER, '--joint-names', 'a,b')
    assert '2 names' in msg and '6 joints' in msg


def test_corrupt_weights_are_refused(tmp_path, capsys):
    folder = copy('lerobot', tmp_path)
    path = os.path.join(folder, WEIGHTS)
    with open(path, 'r+b') as f:
        f.write(b'\xff' * 64)
    msg = import_message(capsys, folder)
    assert WEIGHTS in msg and 'not a readable safetensors file' in msg


def test_truncated_weights_are_refused(tmp_path, capsys):
    folder = copy('lerobot', tmp_path)
    path = os.path.join(folder, WEIGHTS)
    with open(path, 'r+b') as f:
        f.truncate(os.path.getsize(path) // 2)
    msg = import_message(capsys, folder)
    assert WEIGHTS in msg and 'safetensors' in msg


def test_a_shape_that_contradicts_the_others_is_refused(tmp_path, capsys):
    folder = copy('lerobot', tmp_path)
    name = 'model.paligemma_with_expert.gemma_expert.model.layers.1.mlp.up_proj.weight'
    edit_tensors(os.path.join(folder, WEIGHTS),
                 lambda t: t.update({name: np.zeros((80, 48), np.float32)}))
    msg = compile_message(capsys, folder)
    assert name in msg and 'has shape (80, 48)' in msg and '(96, 48)' in msg


def test_non_finite_weights_are_refused(tmp_path, capsys):
    folder = copy('openpi', tmp_path)
    name = 'time_mlp_in.weight'

    def poison(tensors):
        tensors[name] = tensors[name].copy()
        tensors[name][3, 4] = np.nan
    edit_tensors(os.path.join(folder, WEIGHTS), poison)
    msg = compile_message(capsys, folder)
    assert name in msg and 'non-finite' in msg


def test_not_a_checkpoint_folder_is_refused(tmp_path, capsys):
    msg = import_message(capsys, str(tmp_path))
    assert 'checkpoint format matches' in msg or 'neither a LeRobot' in msg
