"""The pi0.5 prompt: the task text plus the discretised state, tokenized to a fixed length.

pi0.5 feeds the robot state to the model as text (`State: 12 200 ...;`), so the exact
binning and string layout are part of the model's input contract and follow openpi.
"""

from dataclasses import dataclass

import numpy as np

STATE_BINS = 256


def discretize_state(state: np.ndarray, bins: int = STATE_BINS) -> np.ndarray:
    """Map a state normalised to [-1, 1] onto integer bins 0..bins-1 (openpi's rule)."""
    state = np.asarray(state, dtype=np.float64)
    if bins < 1:
        raise ValueError(f'bins must be >= 1, got {bins}')
    if not np.all(np.isfinite(state)):
        bad = np.flatnonzero(~np.isfinite(state.ravel())).tolist()
        raise ValueError(f'state has non-finite values at flat indices {bad}')
    edges = np.linspace(-1, 1, bins + 1)[:-1]
    return np.clip(np.digitize(state, edges) - 1, 0, bins - 1).astype(np.int64)


def clean_task(task: str) -> str:
    """Lower-case the task and turn underscores and newlines into spaces."""
    return task.lower().strip().replace('_', ' ').replace('\n', ' ')


def format_prompt(task: str, discrete_state) -> str:
    """Return the pi0.5 prompt string for a task and its discretised state."""
    state_text = ' '.join(map(str, discrete_state))
    return f'Task: {clean_task(task)}, State: {state_text};\nAction: '


@dataclass(frozen=True)
class TokenizedPrompt:
    """Prompt token ids right-padded to a fixed length, with the mask of real tokens."""

    ids: np.ndarray
    mask: np.ndarray
    text: str


def tokenize_prompt(tokenizer, text: str, max_len: int) -> TokenizedPrompt:
    """Tokenize `text` with BOS and pad it to `max_len`; refuse to truncate."""
    if max_len < 1:
        raise ValueError(f'max_len must be >= 1, got {max_len}')
    tokens = tokenizer.encode(text, add_bos=True)
    if len(tokens) > max_len:
        raise ValueError(
            f'prompt has {len(tokens)} tokens, more than max_len={max_len}; truncating would '
            'cut the state, so shorten the task or raise max_len')
    ids = np.full((max_len,), tokenizer.pad_id, dtype=np.int64)
    ids[:len(tokens)] = tokens
    mask = np.zeros((max_len,), dtype=bool)
    mask[:len(tokens)] = True
    return TokenizedPrompt(ids=ids, mask=mask, text=text)


def tokenize_pi05(tokenizer, task: str, state_bins, max_len: int):
    """pi0.5 prompt `Task: ..., State: ...;\\nAction: ` -> (ids, mask), each (1, max_len)."""
    tokens = tokenize_prompt(tokenizer, format_prompt(task, state_bins), max_len)
    return tokens.ids[None], tokens.mask[None]
