"""The pi0.5 prompt: state bins, exact string layout, fixed-length tokenization."""

import numpy as np
import pytest

from lamp_ros.ops.prompt import (
    clean_task, discretize_state, format_prompt, STATE_BINS, tokenize_prompt, TokenizedPrompt)
from lamp_ros.ops.tokenizer import Tokenizer
from lamp_ros.policies.pi05.assets import tokenizer_path


@pytest.fixture(scope='module')
def tok():
    return Tokenizer(tokenizer_path())


def test_state_bins_constant():
    assert STATE_BINS == 256


def test_discretize_hand_picked_values():
    state = np.array([-1.0, 1.0, 0.0, -0.999, 0.5, -0.5, 0.999, 2.0, -2.0,
                      -0.9921875, -0.9921876, 0.00390625], dtype=np.float32)
    bins = discretize_state(state)
    assert bins.dtype == np.int64
    assert bins.tolist() == [0, 255, 128, 0, 192, 64, 255, 255, 0, 1, 0, 128]


def test_discretize_matches_formula():
    rng = np.random.default_rng(0)
    state = rng.uniform(-1.2, 1.2, size=(4, 32))
    expected = np.clip(np.digitize(state, np.linspace(-1, 1, 257)[:-1]) - 1, 0, 255)
    got = discretize_state(state)
    assert got.shape == (4, 32)
    np.testing.assert_array_equal(got, expected)


def test_discretize_other_bin_count():
    assert discretize_state(np.array([-1.0, 0.0, 0.99, 1.0]), bins=4).tolist() == [0, 2, 3, 3]


@pytest.mark.parametrize('bad', [np.nan, np.inf, -np.inf])
def test_discretize_rejects_non_finite(bad):
    with pytest.raises(ValueError, match='state'):
        discretize_state(np.array([0.1, bad, 0.3]))


def test_clean_task():
    assert clean_task('  Pick_Up the RED\ncube  ') == 'pick up the red cube'


def test_format_prompt_exact():
    text = format_prompt('Pick_up the red cube', np.array([12, 200, 45, 128, 0, 255, 77]))
    assert text == 'Task: pick up the red cube, State: 12 200 45 128 0 255 77;\nAction: '


def test_tokenize_pads_and_masks(tok):
    text = format_prompt('pick up the red cube', [12, 200, 45, 128, 0, 255, 77])
    prompt = tokenize_prompt(tok, text, max_len=48)
    assert isinstance(prompt, TokenizedPrompt)
    assert prompt.ids.dtype == np.int64 and prompt.ids.shape == (48,)
    assert prompt.mask.dtype == np.bool_ and prompt.mask.shape == (48,)
    assert prompt.text == text
    n = 41  # 40 text tokens + BOS
    assert prompt.ids[0] == tok.bos_id
    assert prompt.mask[:n].all() and not prompt.mask[n:].any()
    assert (prompt.ids[n:] == tok.pad_id).all()
    assert prompt.ids[:n].tolist() == tok.encode(text, add_bos=True)
    assert tok.decode(prompt.ids[1:]) == text


def test_tokenize_exact_fit(tok):
    text = 'pick up the cup'
    n = len(tok.encode(text, add_bos=True))
    prompt = tokenize_prompt(tok, text, max_len=n)
    assert prompt.mask.all()


def test_tokenize_too_long_is_refused(tok):
    text = format_prompt('pick up the red cube', [12, 200, 45, 128, 0, 255, 77])
    with pytest.raises(ValueError, match=r'prompt has 41 tokens.*max_len=40'):
        tokenize_prompt(tok, text, max_len=40)


def test_prompt_is_frozen(tok):
    prompt = tokenize_prompt(tok, 'open the drawer', max_len=16)
    with pytest.raises(AttributeError):
        prompt.text = 'x'
