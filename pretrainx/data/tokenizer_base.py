"""The interface every tokenizer offers: ids, the special ids, a word-start table.

The data pipeline and the masking objectives only need these, so that is all
`Tokenizer` exposes; each vocabulary format subclasses it in a module of its own.
"""

from __future__ import annotations

import numpy as np

from pretrainx.errors import UserError

SP_WORD_START = "\u2581"  # SentencePiece's mark of a piece that starts a word


def one_line(e: Exception) -> str:
    return " ".join(str(e).split())


class Tokenizer:
    """Common interface; the ids are all a model needs from a tokenizer.

    An id of -1 means the tokenizer has no such token (e.g. mask_id of a T5
    SentencePiece model, which uses sentinels instead).
    """

    vocab_size: int
    pad_id: int
    unk_id: int
    cls_id: int
    sep_id: int
    mask_id: int
    path: str
    _word_start: np.ndarray  # bool[vocab_size], built once at load time
    _special: np.ndarray  # sorted int32

    def encode(self, text: str) -> list[int]:
        """Ids of `text`, without special tokens."""
        raise NotImplementedError

    def decode(self, ids) -> str:
        raise NotImplementedError

    def id_to_piece(self, i: int) -> str:
        raise NotImplementedError

    def special_ids(self) -> np.ndarray:
        return self._special.copy()

    def word_start_mask(self, ids: np.ndarray) -> np.ndarray:
        """True where an id starts a word, so whole words can be masked together."""
        ids = np.asarray(ids)
        self._check_ids(ids)
        return self._word_start[ids]

    def _check_ids(self, ids: np.ndarray) -> None:
        # Negative ids would silently index from the end of the table.
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab_size):
            bad = ids[(ids < 0) | (ids >= self.vocab_size)].flat[0]
            raise UserError(
                f"token id {bad} out of range [0, {self.vocab_size}) for {self.path}")

    def _id_list(self, ids) -> list[int]:
        arr = np.asarray(ids, dtype=np.int64).reshape(-1)
        self._check_ids(arr)
        return [i for i in arr.tolist() if i != self.pad_id]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r}, vocab_size={self.vocab_size})"
