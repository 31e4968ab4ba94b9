"""BERT's WordPiece, id for id as BERT's own tokenizer (BasicTokenizer + greedy
longest-match-first pieces), so checkpoints of Google's or HuggingFace's BERT
tooling keep working."""

from __future__ import annotations

import functools
import itertools
import unicodedata

import numpy as np

from pretrainx.data.tokenizer_base import Tokenizer
from pretrainx.errors import UserError

SPECIAL_PIECES = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
_MAX_WORD_CHARS = 100  # BERT's max_input_chars_per_word
_MAX_CACHED_WORDS = 1 << 20  # bounds memory on corpora with huge vocabularies


_CJK_RANGES = (
    (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F),
)


def _is_cjk(cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


def _is_control(ch: str) -> bool:
    return ch not in "\t\n\r" and unicodedata.category(ch).startswith("C")


def _is_whitespace(ch: str) -> bool:
    return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


def _is_punctuation(ch: str) -> bool:
    # BERT counts all non-alphanumeric ASCII ($, +, ^, ...) as punctuation.
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


class _CleanTable(dict):
    """str.translate table for BERT's clean-text, CJK-spacing and lower-case pass.

    Filled lazily per code point, so a text costs one C-level pass instead of
    Python work per character. Lower-casing is per character, as in
    HuggingFace's BERT tokenizers (Google's lower-cases per word, which turns a
    word-final Greek capital sigma into "ς" instead of "σ").
    """

    def __init__(self, lower_case: bool):
        super().__init__()
        self._lower_case = lower_case

    def __missing__(self, cp: int) -> str:
        ch = chr(cp)
        if cp == 0 or cp == 0xFFFD or _is_control(ch):
            out = ""
        elif _is_whitespace(ch):
            out = " "
        elif _is_cjk(cp):
            out = f" {ch} "
        else:
            out = ch.lower() if self._lower_case else ch
        self[cp] = out
        return out


class _PunctTable(dict):
    """str.translate table that isolates punctuation (and drops accents when lower-casing)."""

    def __init__(self, strip_accents: bool):
        super().__init__()
        self._strip_accents = strip_accents

    def __missing__(self, cp: int) -> str:
        ch = chr(cp)
        if self._strip_accents and unicodedata.category(ch) == "Mn":
            out = ""
        elif _is_punctuation(ch):
            out = f" {ch} "
        else:
            out = ch
        self[cp] = out
        return out


class _WordCache(dict):
    """word -> tuple of ids; misses run the greedy WordPiece search."""

    def __init__(self, split_word):
        super().__init__()
        self._split_word = split_word

    def __missing__(self, word: str) -> tuple[int, ...]:
        if len(self) >= _MAX_CACHED_WORDS:
            self.clear()
        ids = self._split_word(word)
        self[word] = ids
        return ids


class WordPieceTokenizer(Tokenizer):
    """BERT's FullTokenizer (BasicTokenizer + WordPiece) over a vocab.txt."""

    def __init__(self, path: str, lower_case: bool = True):
        self.path = path
        self.lower_case = lower_case
        self._pieces = _read_vocab(path)
        self._vocab = {p: i for i, p in enumerate(self._pieces)}
        self.vocab_size = len(self._pieces)
        missing = [p for p in SPECIAL_PIECES if p not in self._vocab]
        if missing:
            raise UserError(f"vocab {path} lacks special token(s) {' '.join(missing)}")
        (self.pad_id, self.unk_id, self.cls_id, self.sep_id,
         self.mask_id) = (self._vocab[p] for p in SPECIAL_PIECES)
        self._special = np.array(sorted({self._vocab[p] for p in SPECIAL_PIECES}), np.int32)
        self._word_start = np.array([not p.startswith("##") for p in self._pieces], bool)
        self._word_start[self._special] = True
        # Pieces longer than this never match, so the search can start shorter.
        self._max_piece_chars = max(
            len(p[2:]) if p.startswith("##") else len(p) for p in self._pieces)
        self._words = _WordCache(self._split_word)

    def encode(self, text: str) -> list[int]:
        words = self._basic_tokenize(text)
        return list(itertools.chain.from_iterable(map(self._words.__getitem__, words)))

    def tokenize(self, text: str) -> list[str]:
        """Word pieces of `text`; handy when debugging a vocab."""
        return [self._pieces[i] for i in self.encode(text)]

    def words(self, text: str) -> list[str]:
        """BERT's words of `text` (cleaned, lower-cased as the vocabulary is, split at
        spaces and punctuation), before WordPiece splits them."""
        return self._basic_tokenize(text)

    def word_ids(self, word: str) -> tuple[int, ...]:
        """The ids WordPiece splits one word of `words` into."""
        return self._words[word]

    def pieces(self) -> list[str]:
        """vocab.txt's pieces, in id order."""
        return list(self._pieces)

    def decode(self, ids) -> str:
        pieces = [self._pieces[i] for i in self._id_list(ids)]
        return " ".join(pieces).replace(" ##", "").strip()

    def id_to_piece(self, i: int) -> str:
        return self._pieces[i]

    def _basic_tokenize(self, text: str) -> list[str]:
        return _basic_words(text, self.lower_case)

    def _split_word(self, word: str) -> tuple[int, ...]:
        """Greedy longest-match-first; any unmatched remainder makes the word [UNK]."""
        if len(word) > _MAX_WORD_CHARS:
            return (self.unk_id,)
        vocab, ids, start, n = self._vocab, [], 0, len(word)
        while start < n:
            end = min(n, start + self._max_piece_chars)
            prefix = "##" if start else ""
            while end > start:
                i = vocab.get(prefix + word[start:end])
                if i is not None:
                    break
                end -= 1
            else:
                return (self.unk_id,)
            ids.append(i)
            start = end
        return tuple(ids)


def _read_vocab(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8-sig") as f:
            pieces = [line.rstrip("\r\n") for line in f]
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read vocab {path}: {e}") from None
    while pieces and not pieces[-1]:
        pieces.pop()  # trailing blank lines are not tokens
    if not pieces:
        raise UserError(f"vocab {path} is empty")
    # A line's number is its id: an empty or repeated line shifts every later id ([MASK]
    # included) or leaves an id no text maps to, so the file is refused, not guessed at.
    first = {}
    for number, piece in enumerate(pieces, 1):
        if not piece.strip():
            raise UserError(f"vocab {path} line {number} is empty: every id after it would "
                            "shift; remove the line (or restore the piece it held)")
        if piece in first:
            raise UserError(f"vocab {path} line {number} repeats {piece!r} of line "
                            f"{first[piece]}: ids would shift; remove the repeat")
        first[piece] = number
    return pieces




@functools.lru_cache(maxsize=2)
def _basic_tables(lower_case: bool):
    return _CleanTable(lower_case), _PunctTable(strip_accents=lower_case)


def _basic_words(text: str, lower_case: bool) -> list[str]:
    """BERT's BasicTokenizer: clean, lower-case and strip accents, split punctuation."""
    clean, punct = _basic_tables(lower_case)
    text = text.translate(clean)
    if lower_case and not text.isascii():
        text = unicodedata.normalize("NFD", text)
    return text.translate(punct).split()


def bert_pretokenize(text: str, lower_case: bool = True) -> str:
    """BERT's BasicTokenizer output, words joined by spaces: what WordPiece sees."""
    return " ".join(_basic_words(text, lower_case))
