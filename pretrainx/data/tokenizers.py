"""`load_tokenizer`: the right tokenizer for a vocabulary file, by its name.

WordPiece (vocab.txt), SentencePiece (.model), GPT-2's byte-level BPE (vocab.json +
merges.txt), a fast tokenizer's tokenizer.json and ELMo's word lists (.words) share
one interface (tokenizer_base).
"""

from __future__ import annotations

import glob
import os

from pretrainx.data import bpe, folder_ids, words
from pretrainx.data.fast_tokenizer import FastTokenizer
from pretrainx.data import sentencepiece_tokenizer
from pretrainx.data.sentencepiece_tokenizer import SentencePieceTokenizer  # noqa: F401
from pretrainx.data.tokenizer_base import Tokenizer
from pretrainx.data.tokenizer_training import train_sentencepiece, train_wordpiece  # noqa: F401
from pretrainx.data.wordpiece import SPECIAL_PIECES, WordPieceTokenizer, bert_pretokenize  # noqa: F401
from pretrainx.errors import UserError


def load_tokenizer(path: str, lower_case: bool = True, layout: str = "") -> Tokenizer:
    """Picks the implementation from the file name: vocab.txt (WordPiece), .model
    (SentencePiece), vocab.json + merges.txt or their folder (GPT-2 byte-level BPE).

    `lower_case` applies to WordPiece only; a SentencePiece model carries its
    own normalization rule. `layout` (a family's tokenizer_layout, bpe.LAYOUTS) gives
    a byte-level vocabulary, or a SentencePiece model without a pad piece (XLM-R's),
    the ids that family trains it under.

    The tokenizer carries `source_key`: its files (path, size, modification time) and
    options, equal for two loads of the same unchanged files, so that text it has
    tokenized can be reused by a later run in the same process (data/corpus.py).
    """
    path = os.path.expanduser(path)
    tokenizer = _load(path, lower_case, layout)
    tokenizer.source_key = (os.path.abspath(path), bool(lower_case), layout, _file_stats(path))
    return tokenizer


def _file_stats(path: str) -> tuple:
    paths = ([path] if not os.path.isdir(path)
             else sorted(glob.glob(os.path.join(glob.escape(path), "*"))))
    return tuple((p, s.st_size, s.st_mtime_ns) for p in paths if os.path.isfile(p)
                 for s in [os.stat(p)])


def _load(path: str, lower_case: bool, layout: str) -> Tokenizer:
    if os.path.isdir(path):  # its tokenizer.json decides where the family's file disagrees
        chosen = _tokenizer_file_in(path)
        ours = _load(chosen, lower_case, layout)
        truth = folder_ids.agreeing(path, chosen, lambda: ours)
        return ours if truth == chosen else FastTokenizer(truth)
    byte_level = bpe.files_in(path)
    if byte_level:
        tokenizer = bpe.ByteLevelBPETokenizer(*byte_level)
        return bpe.LAYOUTS[layout](tokenizer) if layout else tokenizer
    if not os.path.exists(path):
        raise UserError(f"tokenizer file not found: {path}")
    if path.endswith("tokenizer.json"):  # ids are the file's: no family layout
        return FastTokenizer(path)
    if path.endswith(".txt"):
        return WordPieceTokenizer(path, lower_case=lower_case)
    if path.endswith(".model"):  # XLM-R's in fairseq's ids under RoBERTa's layout
        return sentencepiece_tokenizer.load(path, layout)
    if path.endswith(".words"):
        return words.WordTokenizer(path)
    raise UserError(f"unknown tokenizer type for {path}: expected a .txt vocab, a .model, "
                    "a tokenizer.json or a .words file")


def _tokenizer_file_in(directory: str) -> str:
    if bpe.files_in(directory):
        return os.path.join(directory, "vocab.json")
    for name in ("vocab.txt", "spiece.model", "tokenizer.json"):
        if os.path.isfile(os.path.join(directory, name)):
            return os.path.join(directory, name)
    models = sorted(glob.glob(os.path.join(glob.escape(directory), "*.model")))
    if len(models) == 1:
        return models[0]
    if models:
        raise UserError(f"several .model files in {directory}; pass one of them explicitly")
    raise UserError(f"no vocab.txt, tokenizer.json or .model file in {directory}")
