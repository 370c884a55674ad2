"""The pi0.5 prompt: the task text plus the discretised state, tokenized to a fixed length.

pi0.5 feeds the robot state to the model as text (`State: 12 200 ...;`), so the exact
binning and string layout are part of the model's input contract. They differ in small ways
between the code bases a checkpoint can come from (`PromptFormat`): a checkpoint only does what
it was trained to do when its prompt is written exactly as its trainer wrote it.
"""

from dataclasses import asdict, dataclass

import numpy as np

STATE_BINS = 256


def discretize_state(state: np.ndarray, bins: int = STATE_BINS,
                     clip_bins: bool = True) -> np.ndarray:
    """Map a state normalised to [-1, 1] onto integer bins 0..bins-1 (openpi's rule);
    without `clip_bins` a value below -1 is bin -1, as LeRobot writes it."""
    state = np.asarray(state, dtype=np.float64)
    if bins < 1:
        raise ValueError(f'bins must be >= 1, got {bins}')
    if not np.all(np.isfinite(state)):
        bad = np.flatnonzero(~np.isfinite(state.ravel())).tolist()
        raise ValueError(f'state has non-finite values at flat indices {bad}')
    edges = np.linspace(-1, 1, bins + 1)[:-1]
    out = np.digitize(state, edges) - 1
    return (np.clip(out, 0, bins - 1) if clip_bins else out).astype(np.int64)


@dataclass(frozen=True)
class PromptFormat:
    """How one code base writes the pi0.5 prompt (docs/checkpoints.md, "The prompt contract").

    lamp (lamp's own presets): lower-cased task, state clipped to [-1, 1] before binning, a
    prompt over the token budget refused. lerobot (0.6.1, Pi05PrepareStateTokenizerProcessorStep
    and TokenizerProcessorStep) and openpi (PaligemmaTokenizer.tokenize at 15a9616): the task's
    case kept, no clipping (a state below q01 is bin -1), the robot's own state dims, the tokens
    cut at the budget (openpi logs a warning, LeRobot says nothing)."""

    name: str = 'lamp'
    lower_case: bool = True
    clip_state: bool = True
    truncate: bool = False

    def clean(self, task: str) -> str:
        """The task as it goes into the prompt: `_` and newlines as spaces, stripped."""
        task = task.lower() if self.lower_case else task
        return task.strip().replace('_', ' ').replace('\n', ' ')

    def discretize(self, norm_state, bins: int = STATE_BINS) -> np.ndarray:
        """Normalised state -> the bins written into the prompt."""
        state = np.asarray(norm_state, dtype=np.float64)
        if self.clip_state:
            state = np.clip(state, -1.0, 1.0)
        return discretize_state(state, bins, clip_bins=self.clip_state)

    def attrs(self) -> dict:
        """Graph attrs: none for lamp's own format (graphs before formats existed)."""
        return {} if self == FORMATS['lamp'] else {'prompt_format': asdict(self)}

    @classmethod
    def from_attrs(cls, attrs: dict) -> 'PromptFormat':
        given = attrs.get('prompt_format')
        if given is None:
            return FORMATS['lamp']
        unknown = sorted(set(given) - set(asdict(FORMATS['lamp'])))
        if unknown:
            raise ValueError(f'prompt_format: unknown fields {unknown}')
        return cls(**given)


FORMATS = {
    'lamp': PromptFormat(),
    'lerobot': PromptFormat('lerobot', lower_case=False, clip_state=False, truncate=True),
    'openpi': PromptFormat('openpi', lower_case=False, clip_state=False, truncate=True),
}


def prompt_format(name: str) -> PromptFormat:
    if name not in FORMATS:
        raise ValueError(f'prompt_format: {name!r}; known: {", ".join(FORMATS)}')
    return FORMATS[name]


def clean_task(task: str) -> str:
    """Lower-case the task and turn underscores and newlines into spaces (lamp's format)."""
    return FORMATS['lamp'].clean(task)


def format_prompt(task: str, discrete_state, fmt: PromptFormat | None = None) -> str:
    """Return the pi0.5 prompt string for a task and its discretised state."""
    state_text = ' '.join(map(str, discrete_state))
    return f'Task: {(fmt or FORMATS["lamp"]).clean(task)}, State: {state_text};\nAction: '


@dataclass(frozen=True)
class TokenizedPrompt:
    """Prompt token ids right-padded to a fixed length, with the mask of real tokens."""

    ids: np.ndarray
    mask: np.ndarray
    text: str


def tokenize_prompt(tokenizer, text: str, max_len: int,
                    truncate: bool = False) -> TokenizedPrompt:
    """Tokenize `text` with BOS and pad it to `max_len`; refuse to truncate unless told to (a
    checkpoint trained with truncated prompts)."""
    if max_len < 1:
        raise ValueError(f'max_len must be >= 1, got {max_len}')
    tokens = tokenizer.encode(text, add_bos=True)
    if truncate:
        tokens = tokens[:max_len]
    if len(tokens) > max_len:
        raise ValueError(
            f'prompt has {len(tokens)} tokens, more than max_len={max_len}; truncating would '
            'cut the state, so shorten the task or raise max_len')
    ids = np.full((max_len,), tokenizer.pad_id, dtype=np.int64)
    ids[:len(tokens)] = tokens
    mask = np.zeros((max_len,), dtype=bool)
    mask[:len(tokens)] = True
    return TokenizedPrompt(ids=ids, mask=mask, text=text)


def tokenize_pi05(tokenizer, task: str, state_bins, max_len: int,
                  fmt: PromptFormat | None = None):
    """pi0.5 prompt `Task: ..., State: ...;\\nAction: ` -> (ids, mask), each (1, max_len)."""
    fmt = fmt or FORMATS['lamp']
    tokens = tokenize_prompt(tokenizer, format_prompt(task, state_bins, fmt), max_len,
                             fmt.truncate)
    return tokens.ids[None], tokens.mask[None]
