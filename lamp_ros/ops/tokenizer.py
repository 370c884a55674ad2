"""Sentencepiece tokenizer for the policy prompt, loaded from bytes so it can be hashed.

The artifact records `sha256` of the model file: a prompt tokenized by a different model
than the one the policy was compiled with gives wrong ids without any error, so the hash is
the only way to catch the mismatch.
"""

import hashlib
from typing import Iterable

import sentencepiece as spm


class Tokenizer:
    """Encode and decode prompt text with one sentencepiece model file."""

    def __init__(self, model_path: str):
        self.model_path = model_path
        try:
            with open(self.model_path, 'rb') as f:
                self._model_bytes = f.read()
        except OSError as e:
            raise ValueError(f'tokenizer model {self.model_path!r} cannot be read: {e}') from e
        self._sp = spm.SentencePieceProcessor()
        try:
            self._sp.LoadFromSerializedProto(self._model_bytes)
        except (RuntimeError, OSError) as e:
            raise ValueError(
                f'tokenizer model {self.model_path!r} is not a sentencepiece model: {e}') from e
        self.vocab_size: int = int(self._sp.GetPieceSize())
        if self.vocab_size <= 0:
            raise ValueError(f'tokenizer model {self.model_path!r} has an empty vocabulary')
        self.pad_id: int = int(self._sp.pad_id())
        self.bos_id: int = int(self._sp.bos_id())
        self.eos_id: int = int(self._sp.eos_id())

    @property
    def sha256(self) -> str:
        """Hex sha256 of the model file bytes, as recorded in artifacts."""
        return hashlib.sha256(self._model_bytes).hexdigest()

    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        """Return the token ids of `text`, optionally preceded by BOS."""
        if not isinstance(text, str):
            raise ValueError(f'text must be a str, got {type(text).__name__}')
        ids = [int(i) for i in self._sp.EncodeAsIds(text)]
        return [self.bos_id] + ids if add_bos else ids

    def decode(self, ids: Iterable[int]) -> str:
        """Return the text of `ids`; padding ids are skipped."""
        kept = [int(i) for i in ids if int(i) != self.pad_id]
        for i in kept:
            if not 0 <= i < self.vocab_size:
                raise ValueError(f'ids: {i} is outside the vocabulary [0, {self.vocab_size})')
        return self._sp.DecodeIds(kept)

    def __repr__(self) -> str:
        return f'Tokenizer({self.model_path!r}, vocab_size={self.vocab_size})'
