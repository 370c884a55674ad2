"""Files the pi0.5 policy ships with (assets/): its sentencepiece tokenizer, the tokenizer's
training corpus, and the norm stats of the simulated 7-joint arm it drives."""

import os

FOLDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'assets')


def tokenizer_path() -> str:
    """The 512-piece sentencepiece model (scripts/train_tokenizer.py makes it)."""
    return os.path.join(FOLDER, 'tokenizer.model')


def tokenizer_corpus_path() -> str:
    return os.path.join(FOLDER, 'tokenizer_corpus.txt')


def norm_stats_path() -> str:
    """Quantile and mean/std stats of the simulated 7-joint arm's state and actions."""
    return os.path.join(FOLDER, 'norm_stats_sim7.json')
