"""SentencePiece models (ours, T5's, ALBERT's; XLM-R's in fairseq's ids) behind the
Tokenizer interface."""

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
        self._sp = sp = _processor(path)
        self.vocab_size = sp.get_piece_size()
        self.pad_id, self.unk_id = sp.pad_id(), sp.unk_id()
        if self.pad_id < 0:
            raise UserError(f"SentencePiece model {path} has no pad piece (pad_id < 0)")
        self.cls_id = self._piece_id("[CLS]", fallback=sp.bos_id())
        self.sep_id = self._piece_id("[SEP]", fallback=sp.eos_id())
        # Gemma's model (mmBERT's vocabulary) names it <mask>
        self.mask_id = self._piece_id("[MASK]", fallback=self._piece_id("<mask>", fallback=-1))
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


class FairseqSentencePiece(Tokenizer):
    """XLM-R's ids over its SentencePiece model (sentencepiece.bpe.model), as fairseq's
    dictionary and HF's XLMRobertaTokenizer give them: <s>=0 <pad>=1 </s>=2 <unk>=3, the
    model's pieces shifted by one (its own <unk> <s> </s> sit at 0-2 and map to these),
    and <mask> last (250,002 ids for XLM-R's 250,000 pieces)."""

    SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")

    def __init__(self, path: str):
        self.path = path
        self._sp = _processor(path)
        sp = self._sp
        if (sp.unk_id(), sp.bos_id(), sp.eos_id()) != (0, 1, 2):
            raise UserError(f"{path}: fairseq's layout needs <unk> <s> </s> at 0 1 2 of the "
                            f"SentencePiece model; it has them at {sp.unk_id()} "
                            f"{sp.bos_id()} {sp.eos_id()}")
        pieces = sp.get_piece_size()
        self.cls_id, self.pad_id, self.sep_id, self.unk_id = range(4)
        self.mask_id = pieces + 1
        self.vocab_size = pieces + 2
        self._special = np.array([0, 1, 2, 3, self.mask_id], np.int32)
        starts = np.ones(self.vocab_size, bool)
        starts[4:self.mask_id] = [sp.id_to_piece(i).startswith(SP_WORD_START)
                                  for i in range(3, pieces)]
        self._word_start = starts

    def encode(self, text: str) -> list[int]:
        return [i + 1 if i else self.unk_id for i in self._sp.encode(text)]

    def decode(self, ids) -> str:
        ids = np.asarray(ids, np.int64).reshape(-1)
        self._check_ids(ids)
        return self._sp.decode([int(i) - 1 for i in ids if 4 <= i < self.mask_id])

    def id_to_piece(self, i: int) -> str:
        i = int(i)
        if i < 4:
            return self.SPECIALS[i]
        return "<mask>" if i == self.mask_id else self._sp.id_to_piece(i - 1)


def _processor(path: str):
    try:
        with open(path, "rb") as f:
            return spm.SentencePieceProcessor(model_proto=f.read())
    except (OSError, RuntimeError) as e:
        raise UserError(f"cannot load SentencePiece model {path}: {one_line(e)}") from None


def load(path: str, layout: str = ""):
    """A SentencePiece model's tokenizer; with layout "fairseq" (RoBERTa's family), a
    model without a pad piece (XLM-R's) takes fairseq's ids (FairseqSentencePiece)."""
    if layout == "fairseq" and _processor(path).pad_id() < 0:
        return FairseqSentencePiece(path)
    return SentencePieceTokenizer(path)
