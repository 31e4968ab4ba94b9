"""GPT-2's byte-level BPE, exactly as OpenAI's encoder.py tokenizes.

Text is split by GPT-2's pattern (contractions, letters, numbers, other symbols,
whitespace, each optionally after one space), every byte of a piece is mapped to
a printable character, and the piece is merged pair by pair in the order of
merges.txt. Any byte string encodes (no unknown token); decoding is exact.
"""

import functools
import json
import os

import numpy as np
import regex

from pretrainx.data.tokenizers import Tokenizer
from pretrainx.errors import UserError

END_OF_TEXT = "<|endoftext|>"
_PATTERN = regex.compile(
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


@functools.lru_cache(maxsize=None)
def byte_to_char() -> dict:
    """Bytes -> printable characters: printable Latin-1 bytes stand for themselves,
    the other 68 take the code points from 256 up, in byte order."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


class ByteLevelBPETokenizer(Tokenizer):
    """vocab.json + merges.txt (GPT-2's, or RoBERTa's which are the same format)."""

    spaces_are_tokens = True  # " the" is one token: sentences join with a space

    def __init__(self, vocab_file: str, merges_file: str):
        self.path = vocab_file
        try:
            with open(vocab_file, encoding="utf-8") as f:
                self._encoder = json.load(f)
            with open(merges_file, encoding="utf-8") as f:
                lines = [ln.rstrip("\n") for ln in f if ln.strip()]
        except (OSError, ValueError) as e:
            raise UserError(f"cannot read GPT-2 vocabulary {vocab_file} / {merges_file}: "
                            f"{e}") from None
        if lines and lines[0].startswith("#version"):
            lines = lines[1:]
        self._ranks = {tuple(ln.split(" ")): i for i, ln in enumerate(lines)}
        self._decoder = {i: piece for piece, i in self._encoder.items()}
        self._bytes = byte_to_char()
        self._unbytes = {c: b for b, c in self._bytes.items()}
        self._cache = {}
        self.vocab_size = max(self._encoder.values()) + 1
        if END_OF_TEXT not in self._encoder:
            raise UserError(f"{vocab_file} has no {END_OF_TEXT} token")
        self.eot_id = self._encoder[END_OF_TEXT]
        # GPT-2 has one special token; it ends documents, starts generation, pads.
        self.pad_id = self.unk_id = self.cls_id = self.sep_id = self.eot_id
        self.mask_id = self._encoder.get("<mask>", -1)
        self._special = np.array(sorted({self.eot_id} | ({self.mask_id} - {-1}
                                                        if self.mask_id >= 0 else set())),
                                 np.int32)
        starts = np.zeros(self.vocab_size, bool)
        for piece, i in self._encoder.items():
            starts[i] = piece.startswith("\u0120") or not piece[:1].isalnum()
        self._word_start = starts

    def _bpe(self, piece: str) -> tuple:
        if piece in self._cache:
            return self._cache[piece]
        word = tuple(piece)
        while len(word) > 1:
            pairs = {(word[i], word[i + 1]) for i in range(len(word) - 1)}
            best = min(pairs, key=lambda p: self._ranks.get(p, float("inf")))
            if best not in self._ranks:
                break
            merged, i = [], 0
            while i < len(word):
                if i < len(word) - 1 and (word[i], word[i + 1]) == best:
                    merged.append(word[i] + word[i + 1])
                    i += 2
                else:
                    merged.append(word[i])
                    i += 1
            word = tuple(merged)
        ids = tuple(self._encoder[p] for p in word)
        if len(self._cache) < 1 << 20:
            self._cache[piece] = ids
        return ids

    def encode(self, text: str) -> list[int]:
        out = []
        for piece in _PATTERN.findall(text):
            out.extend(self._bpe("".join(self._bytes[b] for b in piece.encode("utf-8"))))
        return out

    def decode(self, ids) -> str:
        ids = np.asarray(ids, np.int64).reshape(-1)
        self._check_ids(ids)
        chars = "".join(self._decoder[int(i)] for i in ids)
        return bytes(self._unbytes[c] for c in chars).decode("utf-8", errors="replace")

    def id_to_piece(self, i: int) -> str:
        return self._decoder[int(i)]


def files_in(path: str):
    """(vocab.json, merges.txt) for a directory or a vocab.json path, else None."""
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    vocab, merges = os.path.join(folder, "vocab.json"), os.path.join(folder, "merges.txt")
    if (os.path.isdir(path) or path.endswith("vocab.json")) and os.path.isfile(vocab):
        if not os.path.isfile(merges):
            raise UserError(f"{vocab} needs merges.txt beside it")
        return vocab, merges
    return None
