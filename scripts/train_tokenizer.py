#!/usr/bin/env python3
"""Train the bundled sentencepiece tokenizer so that its bytes are reproducible.

The model is trained from an iterator and written through `model_writer`, so no file path
ends up inside the model proto: the same corpus and options give the same bytes anywhere.
Digits are split one by one because the pi0.5 prompt carries the discretised state as
numbers, and byte fallback keeps every character (the newline before `Action:` included)
encodable.
"""

import argparse
import io
import os
import sys

import sentencepiece as spm

ASSETS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'lamp_ros',
                      'policies', 'pi05', 'assets')
DEFAULT_CORPUS = os.path.join(ASSETS, 'tokenizer_corpus.txt')
DEFAULT_OUT = os.path.join(ASSETS, 'tokenizer.model')
DEFAULT_VOCAB_SIZE = 512


def read_corpus(path: str) -> list[str]:
    """Return the corpus lines without their newline; empty lines are dropped."""
    with open(path, encoding='utf-8') as f:
        lines = [line.rstrip('\n') for line in f]
    lines = [line for line in lines if line.strip()]
    if not lines:
        raise ValueError(f'corpus {path!r} has no non-empty lines')
    return lines


def train_model(lines: list[str], vocab_size: int) -> bytes:
    """Train a BPE model on `lines` and return the serialized model bytes."""
    writer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=writer,
        model_type='bpe',
        vocab_size=vocab_size,
        character_coverage=1.0,
        byte_fallback=True,
        split_digits=True,
        pad_id=0,
        unk_id=1,
        bos_id=2,
        eos_id=3,
        # Keep text exactly as written: the prompt's spaces and newline are part of it.
        normalization_rule_name='identity',
        remove_extra_whitespaces=False,
        add_dummy_prefix=False,
        # Determinism: one thread, every sentence, in file order.
        num_threads=1,
        input_sentence_size=0,
        shuffle_input_sentence=False,
        minloglevel=2,
    )
    return writer.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--corpus', default=DEFAULT_CORPUS, help='plain text, one line each')
    parser.add_argument('--out', default=DEFAULT_OUT, help='where to write the .model file')
    parser.add_argument('--vocab-size', type=int, default=DEFAULT_VOCAB_SIZE)
    args = parser.parse_args(argv)

    model = train_model(read_corpus(args.corpus), args.vocab_size)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, 'wb') as f:
        f.write(model)
    print(f'wrote {args.out} ({len(model)} bytes, vocab {args.vocab_size})')
    return 0


if __name__ == '__main__':
    sys.exit(main())
