"""Training vocabularies: SentencePiece models, and BERT vocab.txt files learnt by
SentencePiece BPE over BERT-pre-tokenized text (`python -m pretrainx.tokenizer train`)."""

from __future__ import annotations

import functools
import io
import itertools
import os
import sys
from typing import Sequence

import numpy as np
import sentencepiece as spm
import tqdm

from pretrainx.data.tokenizer_base import SP_WORD_START, one_line
from pretrainx.data.wordpiece import SPECIAL_PIECES, bert_pretokenize
from pretrainx.errors import UserError


def _read_sentences(input_files: list[str]):
    """Yields non-empty lines, with a progress bar on a terminal."""
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


def temperature_sample(sources: list[list[str]], alpha: float, budget: int, seed: int = 0):
    """(lines, report): about `budget` lines drawn from the sources with probability
    ~ lines^alpha (as XLM-R sampled its SentencePiece input, alpha 0.3), so a small
    language is repeated and a large one thinned. Two passes over the files: count,
    then take the chosen line numbers; memory holds only the drawn lines."""
    if not 0 < alpha <= 1:
        raise UserError(f"--alpha={alpha} must be in (0, 1] (XLM-R: 0.3, mBERT: 0.7)")
    counts = [sum(1 for _ in _lines(files)) for files in sources]
    for files, n in zip(sources, counts):
        if not n:
            raise UserError(f"training input has no text: {', '.join(files)}")
    budget = min(budget, sum(counts))
    powered = np.asarray(counts, np.float64) ** alpha
    shares = powered / powered.sum()
    rng = np.random.default_rng(seed)
    lines, report = [], []
    for files, n, share in zip(sources, counts, shares):
        want = max(int(round(share * budget)), 1)
        # every line want // n times, then want % n distinct lines more
        times = np.full(n, want // n, np.int64)
        times[rng.choice(n, want % n, replace=False)] += 1
        for line, k in zip(_lines(files), times):
            lines.extend([line] * int(k))
        report.append({"files": files, "lines": n, "share": float(share), "drawn": want})
    order = rng.permutation(len(lines))
    return [lines[i] for i in order], report


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
    lines: list[str] | None = None,
    user_symbols: Sequence[str] = (),
) -> str:
    """Trains a model and returns the .model path.

    style "bert": pad=0, unk=1, then `special_tokens`. style "t5": T5's layout,
    <pad>=0, </s>=1, <unk>=2 and nothing else (the T5 objective adds sentinels).
    `user_symbols` follow in either style: pieces the text spells that always stay whole
    (UL2's mode tokens [NLU] [NLG] [S2S]). Deterministic (see `_train_spm`). `lines`
    (from `temperature_sample`) replaces reading `input_files`.
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
    special_tokens = list(special_tokens) + [t for t in user_symbols if t]
    if not isinstance(vocab_size, int) or vocab_size <= 3 + len(special_tokens):
        raise UserError(f"vocab_size {vocab_size!r} is too small")
    proto = _train_spm(input_files, lambda line: line, what="sentencepiece",
                       vocab_size=vocab_size, model_type=model_type,
                       normalization_rule_name="nmt_nfkc_cf" if lower_case else "nmt_nfkc",
                       **ids, user_defined_symbols=special_tokens,
                       input_sentence_size=max_sentences, seed=seed, lines=lines)
    return _write_model(proto, output_prefix)


def _train_spm(input_files, preprocess, what: str, seed: int, lines=None, **options) -> bytes:
    """SentencePiece training over the non-empty preprocessed lines of the input.

    Deterministic: one thread and a fixed seed give byte-identical models (the
    seed is sentencepiece's process-wide random generator).
    """
    if not input_files:
        raise UserError("no training input files given")
    for path in input_files:
        if not os.path.isfile(path):
            raise UserError(f"training input not found: {path}")
    read = _read_sentences(input_files) if lines is None else iter(lines)
    lines = (line for line in map(preprocess, read) if line)
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
                        f"{one_line(e)}") from None
    return model.getvalue()


def _write_model(proto: bytes, output_prefix: str) -> str:
    """Writes PREFIX.model and PREFIX.vocab (piece<TAB>score, as spm_train does)."""
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
        word = piece[1:] if piece.startswith(SP_WORD_START) else "##" + piece
        if word and word != "##":
            pieces.append(word)
        bare = piece.lstrip(SP_WORD_START)
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
