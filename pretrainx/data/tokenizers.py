"""Tokenizers: BERT WordPiece and SentencePiece behind one interface.

The data pipeline and the masking objectives only need ids, the special ids and
a word-start table (for whole-word masking), so that is all `Tokenizer` exposes.
WordPiece reproduces BERT's own tokenization id for id, so checkpoints trained
with Google's or HuggingFace's BERT tooling keep working.
"""

from __future__ import annotations

import functools
import glob
import io
import itertools
import os
import unicodedata

import numpy as np

from pretrainx.errors import UserError

SPECIAL_PIECES = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
_MAX_WORD_CHARS = 100  # BERT's max_input_chars_per_word
_MAX_CACHED_WORDS = 1 << 20  # bounds memory on corpora with huge vocabularies
_SP_WORD_START = "\u2581"


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


# --- WordPiece -------------------------------------------------------------

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
        # Later duplicates win, as in BERT's load_vocab.
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
    return pieces


# --- SentencePiece -----------------------------------------------------------


class SentencePieceTokenizer(Tokenizer):
    """A trained SentencePiece model (ours, or a T5-style one).

    [CLS]/[SEP]/[MASK] are user-defined symbols in our models. T5 models have
    none: cls falls back to bos, sep to eos, and mask_id is -1 (T5 masks spans
    with sentinels, so a missing [MASK] only matters to BERT-style objectives).
    The model's own normalizer decides casing.
    """

    def __init__(self, path: str):
        import sentencepiece as spm

        self.path = path
        try:
            with open(path, "rb") as f:
                proto = f.read()
            self._sp = spm.SentencePieceProcessor(model_proto=proto)
        except (OSError, RuntimeError) as e:
            raise UserError(f"cannot load SentencePiece model {path}: {_one_line(e)}") from None
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
            [sp.id_to_piece(i).startswith(_SP_WORD_START) for i in range(self.vocab_size)], bool)
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


# --- loading and training ------------------------------------------------------


def load_tokenizer(path: str, lower_case: bool = True) -> Tokenizer:
    """Picks the implementation from the file name: vocab.txt (WordPiece), .model
    (SentencePiece), vocab.json + merges.txt or their folder (GPT-2 byte-level BPE).

    `lower_case` applies to WordPiece only; a SentencePiece model carries its
    own normalization rule.
    """
    path = os.path.expanduser(path)
    from pretrainx.data import bpe
    byte_level = bpe.files_in(path)
    if byte_level:
        return bpe.ByteLevelBPETokenizer(*byte_level)
    if os.path.isdir(path):
        path = _tokenizer_file_in(path)
    elif not os.path.exists(path):
        raise UserError(f"tokenizer file not found: {path}")
    if path.endswith(".txt"):
        return WordPieceTokenizer(path, lower_case=lower_case)
    if path.endswith(".model"):
        return SentencePieceTokenizer(path)
    if path.endswith(".words"):
        from pretrainx.data import words
        return words.WordTokenizer(path)
    raise UserError(f"unknown tokenizer type for {path}: expected a .txt vocab, a .model "
                    "or a .words file")


def _tokenizer_file_in(directory: str) -> str:
    for name in ("vocab.txt", "spiece.model"):
        if os.path.isfile(os.path.join(directory, name)):
            return os.path.join(directory, name)
    models = sorted(glob.glob(os.path.join(glob.escape(directory), "*.model")))
    if len(models) == 1:
        return models[0]
    if models:
        raise UserError(f"several .model files in {directory}; pass one of them explicitly")
    raise UserError(f"no vocab.txt or .model file in {directory}")


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())


def _read_sentences(input_files: list[str]):
    """Yields non-empty lines, with a progress bar on a terminal."""
    import sys

    import tqdm
    return iter(tqdm.tqdm(_lines(input_files), desc="reading", unit=" lines", file=sys.stderr,
                          disable=not sys.stderr.isatty(), mininterval=1.0))


def _lines(input_files: list[str]):
    """Non-empty lines; decoding errors must not abort a long training run."""
    for path in input_files:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    line = line.lstrip("\ufeff").strip()
                    if line:
                        yield line
        except OSError as e:
            raise UserError(f"cannot read training input {path}: {e}") from None


def train_sentencepiece(
    input_files: list[str],
    output_prefix: str,
    vocab_size: int,
    model_type: str = "unigram",
    lower_case: bool = True,
    special_tokens=("[CLS]", "[SEP]", "[MASK]"),
    max_sentences: int = 2_000_000,
    seed: int = 0,
    style: str = "bert",
) -> str:
    """Trains a model and returns the .model path.

    style "bert": pad=0, unk=1, then `special_tokens`. style "t5": T5's layout,
    <pad>=0, </s>=1, <unk>=2 and nothing else (the T5 objective adds sentinels).
    Deterministic (see `_train_spm`).
    """
    if model_type not in ("unigram", "bpe", "char", "word"):
        raise UserError(f"model_type must be unigram, bpe, char or word, not {model_type!r}")
    if style not in ("bert", "t5"):
        raise UserError(f"style must be bert or t5, not {style!r}")
    if style == "t5":
        special_tokens = ()
        ids = dict(pad_id=0, eos_id=1, unk_id=2, bos_id=-1, pad_piece="<pad>",
                   eos_piece="</s>", unk_piece="<unk>")
    else:
        ids = dict(pad_id=0, unk_id=1, bos_id=-1, eos_id=-1, pad_piece="[PAD]",
                   unk_piece="[UNK]")
    if not isinstance(vocab_size, int) or vocab_size <= 3 + len(special_tokens):
        raise UserError(f"vocab_size {vocab_size!r} is too small")
    proto = _train_spm(input_files, lambda line: line, what="sentencepiece",
                       vocab_size=vocab_size, model_type=model_type,
                       normalization_rule_name="nmt_nfkc_cf" if lower_case else "nmt_nfkc",
                       **ids, user_defined_symbols=list(special_tokens),
                       input_sentence_size=max_sentences, seed=seed)
    return _write_model(proto, output_prefix)


def _train_spm(input_files, preprocess, what: str, seed: int, **options) -> bytes:
    """SentencePiece training over the non-empty preprocessed lines of the input.

    Deterministic: one thread and a fixed seed give byte-identical models (the
    seed is sentencepiece's process-wide random generator).
    """
    import sentencepiece as spm

    if not input_files:
        raise UserError("no training input files given")
    for path in input_files:
        if not os.path.isfile(path):
            raise UserError(f"training input not found: {path}")
    lines = (line for line in map(preprocess, _read_sentences(input_files)) if line)
    try:
        first = next(lines)
    except StopIteration:
        raise UserError(f"training input has no text: {', '.join(input_files)}") from None
    spm.set_random_generator_seed(seed)
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=itertools.chain([first], lines), model_writer=model,
            shuffle_input_sentence=True, num_threads=1, minloglevel=2, **options)
    except RuntimeError as e:
        raise UserError(f"{what} training failed (vocab_size={options['vocab_size']}): "
                        f"{_one_line(e)}") from None
    return model.getvalue()


def _write_model(proto: bytes, output_prefix: str) -> str:
    """Writes PREFIX.model and PREFIX.vocab (piece<TAB>score, as spm_train does)."""
    import sentencepiece as spm

    parent = os.path.dirname(output_prefix)
    if parent:
        os.makedirs(parent, exist_ok=True)
    model_path = output_prefix + ".model"
    with open(model_path, "wb") as f:
        f.write(proto)
    sp = spm.SentencePieceProcessor(model_proto=proto)
    with open(output_prefix + ".vocab", "w", encoding="utf-8") as f:
        for i in range(sp.get_piece_size()):
            f.write(f"{sp.id_to_piece(i)}\t{sp.get_score(i):g}\n")
    return model_path


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


def train_wordpiece(input_files: list[str], output_dir: str, vocab_size: int,
                    lower_case: bool = True, max_sentences: int = 2_000_000,
                    seed: int = 0) -> str:
    """A BERT-style vocab.txt: [PAD] [UNK] [CLS] [SEP] [MASK], then word pieces.

    The pieces are learnt by SentencePiece BPE over text that went through BERT's
    own basic tokenizer (so no piece crosses a word or punctuation), then renamed:
    a piece that starts a word loses its U+2581 mark, one inside a word gets
    "##". Every character is kept in both forms, so no word of the training
    alphabet becomes [UNK]. Deterministic, like `train_sentencepiece`.
    """
    import sentencepiece as spm

    if not isinstance(vocab_size, int) or vocab_size < 100:
        raise UserError(f"vocab_size {vocab_size!r} is too small for a WordPiece vocab (>= 100)")
    basic = functools.partial(bert_pretokenize, lower_case=lower_case)
    proto = _train_spm(input_files, basic, what="wordpiece",
                       vocab_size=vocab_size - len(SPECIAL_PIECES), model_type="bpe",
                       normalization_rule_name="identity", pad_id=-1, bos_id=-1, eos_id=-1,
                       unk_id=0, character_coverage=1.0, split_digits=False,
                       input_sentence_size=max_sentences, hard_vocab_limit=False, seed=seed)
    sp = spm.SentencePieceProcessor(model_proto=proto)
    chars, pieces = [], []
    for i in range(sp.get_piece_size()):
        if sp.is_unknown(i) or sp.is_control(i):
            continue
        piece = sp.id_to_piece(i)
        word = piece[1:] if piece.startswith(_SP_WORD_START) else "##" + piece
        if word and word != "##":
            pieces.append(word)
        bare = piece.lstrip(_SP_WORD_START)
        if len(bare) == 1:
            chars.append(bare)
    vocab = list(SPECIAL_PIECES)
    seen = set(vocab)
    for word in [c for c in chars] + ["##" + c for c in chars] + pieces:
        if word not in seen and len(vocab) < vocab_size:
            seen.add(word)
            vocab.append(word)
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, "vocab.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(vocab) + "\n")
    return path
