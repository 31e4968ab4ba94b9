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

from pretrainx.data.tokenizer_base import Tokenizer
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
        if "<s>" in self._encoder and "</s>" in self._encoder:
            # RoBERTa's vocab.json: fairseq's <s> <pad> </s> <unk> and a <mask>.
            get = self._encoder.get
            self.cls_id, self.sep_id = get("<s>"), get("</s>")
            self.pad_id, self.unk_id = get("<pad>", self.sep_id), get("<unk>", self.sep_id)
            self.eot_id = get(END_OF_TEXT, self.sep_id)
        elif END_OF_TEXT not in self._encoder:
            raise UserError(f"{vocab_file} has no {END_OF_TEXT} token")
        else:
            self.eot_id = self._encoder[END_OF_TEXT]
            # GPT-2 has one special token; it ends documents, starts generation, pads.
            self.pad_id = self.unk_id = self.cls_id = self.sep_id = self.eot_id
        self.mask_id = self._encoder.get("<mask>", -1)
        named = {self.eot_id, self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id}
        self._special = np.array(sorted(named - {-1}), np.int32)
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


class RobertaLayout(Tokenizer):
    """RoBERTa's ids over GPT-2's vocab.json: fairseq's dictionary layout, <s>=0 <pad>=1
    </s>=2 <unk>=3, then GPT-2's pieces shifted by 4, filler ids up to a multiple of 8,
    and <mask> last (50,265 ids for GPT-2's 50,257, <mask>=50264, as roberta-base).
    fairseq orders the pieces by corpus frequency, HF's roberta vocab.json too; here they
    keep GPT-2's order, so the ids are not roberta-base's (a RoBERTa vocab.json loads
    as it is, with its own ids)."""

    spaces_are_tokens = True
    SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")

    def __init__(self, base: ByteLevelBPETokenizer):
        self.base, self.path = base, base.path
        self.offset = len(self.SPECIALS)
        used = self.offset + base.vocab_size
        self.mask_id = -(-used // 8) * 8
        self.vocab_size = self.mask_id + 1
        self.cls_id, self.pad_id, self.sep_id, self.unk_id = range(4)
        self.eot_id = base.eot_id + self.offset  # an ordinary token here: </s> ends documents
        self._special = np.array(list(range(4)) + list(range(used, self.vocab_size)), np.int32)
        starts = np.ones(self.vocab_size, bool)
        starts[self.offset:used] = base._word_start
        self._word_start = starts

    def encode(self, text: str) -> list[int]:
        return [i + self.offset for i in self.base.encode(text)]

    def decode(self, ids) -> str:
        ids = np.asarray(ids, np.int64).reshape(-1)
        self._check_ids(ids)
        words = ids[(ids >= self.offset) & (ids < self.offset + self.base.vocab_size)]
        return self.base.decode(words - self.offset)

    def id_to_piece(self, i: int) -> str:
        i = int(i)
        if i < self.offset:
            return self.SPECIALS[i]
        if i == self.mask_id:
            return "<mask>"
        if i >= self.offset + self.base.vocab_size:
            return f"madeupword{i - self.offset - self.base.vocab_size:04d}"
        return self.base.id_to_piece(i - self.offset)


def roberta_ids(tokenizer):
    """The tokenizer RoBERTa trains with: a RoBERTa vocab.json as it is, GPT-2's
    (no <s>, no <mask>) in RoBERTa's layout (RobertaLayout)."""
    if isinstance(tokenizer, ByteLevelBPETokenizer) and tokenizer.cls_id == tokenizer.eot_id:
        return RobertaLayout(tokenizer)
    return tokenizer


# Id layouts a model family may train a vocabulary file under (models.Family's
# tokenizer_layout): the same files give other ids to the model that trained on them.
LAYOUTS = {"fairseq": roberta_ids}


def vocab_json(tokenizer) -> dict:
    """{piece: id} of a byte-level tokenizer as HF's vocab.json holds it (fairseq's
    layout included: specials first, fillers, <mask> last)."""
    return {tokenizer.id_to_piece(i): i for i in range(tokenizer.vocab_size)}


def files_in(path: str):
    """(vocab.json, merges.txt) for a directory or a vocab.json path, else None."""
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    vocab, merges = os.path.join(folder, "vocab.json"), os.path.join(folder, "merges.txt")
    if (os.path.isdir(path) or path.endswith("vocab.json")) and os.path.isfile(vocab):
        if not os.path.isfile(merges):
            raise UserError(f"{vocab} needs merges.txt beside it")
        return vocab, merges
    return None
