"""SentencePiece models (ours, T5's, ALBERT's) behind the Tokenizer interface."""

from __future__ import annotations

import numpy as np
import sentencepiece as spm

from pretrainx.data.tokenizer_base import SP_WORD_START, Tokenizer, one_line
from pretrainx.errors import UserError


class SentencePieceTokenizer(Tokenizer):
    """A trained SentencePiece model (ours, or a T5-style one).

    [CLS]/[SEP]/[MASK] are user-defined symbols in our models. T5 models have
    none: cls falls back to bos, sep to eos, and mask_id is -1 (T5 masks spans
    with sentinels, so a missing [MASK] only matters to BERT-style objectives).
    The model's own normalizer decides casing.
    """

    def __init__(self, path: str):
        self.path = path
        try:
            with open(path, "rb") as f:
                proto = f.read()
            self._sp = spm.SentencePieceProcessor(model_proto=proto)
        except (OSError, RuntimeError) as e:
            raise UserError(f"cannot load SentencePiece model {path}: {one_line(e)}") from None
        sp = self._sp
        self.vocab_size = sp.get_piece_size()
        self.pad_id, self.unk_id = sp.pad_id(), sp.unk_id()
        if self.pad_id < 0:
            raise UserError(f"SentencePiece model {path} has no pad piece (pad_id < 0)")
        self.cls_id = self._piece_id("[CLS]", fallback=sp.bos_id())
        self.sep_id = self._piece_id("[SEP]", fallback=sp.eos_id())
        self.mask_id = self._piece_id("[MASK]", fallback=-1)
        named = {self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id} - {-1}
        control = {i for i in range(self.vocab_size) if sp.is_control(i)}
        self._special = np.array(sorted(named | control), np.int32)
        self._word_start = np.array(
            [sp.id_to_piece(i).startswith(SP_WORD_START) for i in range(self.vocab_size)], bool)
        self._word_start[self._special] = True

    def _piece_id(self, piece: str, fallback: int) -> int:
        # piece_to_id answers unk for absent pieces, so check the round trip.
        i = self._sp.piece_to_id(piece)
        return i if self._sp.id_to_piece(i) == piece else fallback

    def encode(self, text: str) -> list[int]:
        return self._sp.encode(text)

    def decode(self, ids) -> str:
        return self._sp.decode(self._id_list(ids))

    def id_to_piece(self, i: int) -> str:
        return self._sp.id_to_piece(i)
