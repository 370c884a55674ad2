"""The bundled tokenizer: round trips, special ids, hash, and reproducible training."""

import hashlib
import os
import time

import pytest

from load_script import load_script
from lamp_ros.ops.prompt import format_prompt
from lamp_ros.ops.tokenizer import Tokenizer
from lamp_ros.policies.pi05.assets import tokenizer_path

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(REPO, 'lamp_ros', 'policies', 'pi05', 'assets', 'tokenizer_corpus.txt')


def _load_train_script():
    return load_script('scripts', 'train_tokenizer.py')


@pytest.fixture(scope='module')
def tok():
    return Tokenizer(tokenizer_path())


def test_default_path_is_bundled_model():
    path = tokenizer_path()
    assert path.endswith(os.path.join('lamp_ros', 'policies', 'pi05', 'assets', 'tokenizer.model'))
    assert os.path.isfile(path)
    assert Tokenizer(tokenizer_path()).model_path == path


def test_special_ids_and_vocab(tok):
    assert tok.vocab_size == 512
    assert (tok.pad_id, tok.bos_id, tok.eos_id) == (0, 2, 3)


@pytest.mark.parametrize('text', [
    'pick up the red cube',
    'Open the top drawer and put the sponge inside.',
    'fold the towel',
    '  two leading spaces and two trailing  ',
    'unicode falls back to bytes: äé 日本',
    format_prompt('Pick_up the red cube', [12, 200, 45, 128, 0, 255, 77]),
    format_prompt('stack the blue block on the green block', list(range(0, 256, 8))),
])
def test_round_trip(tok, text):
    ids = tok.encode(text)
    assert all(0 <= i < tok.vocab_size for i in ids)
    assert tok.decode(ids) == text


def test_full_prompt_tokens(tok):
    text = 'Task: pick up the red cube, State: 12 200 45 128 0 255 77;\nAction: '
    ids = tok.encode(text)
    assert len(ids) == 40
    assert tok.decode(ids) == text
    # The newline has no piece of its own: byte fallback gives exactly one byte token.
    newline = tok.encode('\n')
    assert len(newline) == 1 and newline[0] in ids


def test_digits_are_split_one_by_one(tok):
    pieces = [tok.decode([i]) for i in tok.encode(', State: 12 200 7')]
    assert pieces[-9:] == [' ', '1', '2', ' ', '2', '0', '0', ' ', '7']
    for number in ['0', '7', '42', '128', '255']:
        assert len(tok.encode(number)) == len(number)


def test_bos_prepended_once(tok):
    plain = tok.encode('pick up the cup')
    with_bos = tok.encode('pick up the cup', add_bos=True)
    assert with_bos == [2] + plain
    assert tok.bos_id not in plain


def test_decode_skips_padding(tok):
    ids = tok.encode('close the drawer')
    assert tok.decode(ids + [tok.pad_id] * 5) == 'close the drawer'
    assert tok.decode([tok.pad_id, tok.pad_id]) == ''


def test_decode_rejects_out_of_vocab(tok):
    with pytest.raises(ValueError, match='ids'):
        tok.decode([5, 512])


def test_sha256_matches_file_bytes(tok):
    with open(tokenizer_path(), 'rb') as f:
        expected = hashlib.sha256(f.read()).hexdigest()
    assert tok.sha256 == expected
    assert Tokenizer(tokenizer_path()).sha256 == expected
    assert len(expected) == 64


def test_missing_model_names_path(tmp_path):
    path = str(tmp_path / 'nope.model')
    with pytest.raises(ValueError, match='nope.model'):
        Tokenizer(path)


def test_corrupt_model_names_path(tmp_path):
    path = tmp_path / 'corrupt.model'
    path.write_bytes(b'this is not a protobuf' * 10)
    with pytest.raises(ValueError, match='corrupt.model'):
        Tokenizer(str(path))


def test_training_is_deterministic(tmp_path):
    train = _load_train_script()
    start = time.monotonic()
    outs = []
    for name in ('a', 'b'):
        out = tmp_path / name / 'tokenizer.model'
        assert train.main(['--corpus', CORPUS, '--out', str(out), '--vocab-size', '400']) == 0
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    assert Tokenizer(str(tmp_path / 'a' / 'tokenizer.model')).vocab_size == 400
    assert time.monotonic() - start < 5.0


def test_bundled_model_is_reproducible(tmp_path):
    train = _load_train_script()
    out = tmp_path / 'tokenizer.model'
    train.main(['--corpus', CORPUS, '--out', str(out)])
    with open(tokenizer_path(), 'rb') as f:
        assert out.read_bytes() == f.read()
