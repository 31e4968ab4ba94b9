"""Extend a released WordPiece vocabulary with whole words of your domain, before
continued pretraining.

    python -m pretrainx.extend_vocab --init_from=/models/bert-base-uncased \\
        --corpus='/data/pubmed/*.txt' --new_words=1000 --output=/models/bert-pubmed
    python -m pretrainx.main --config=configs/continue_mlm.py:bert \\
        --config.init_from=/models/bert-pubmed --config.data.train_files='/data/pubmed/*.txt'

A word of the corpus that the vocabulary splits into several pieces ("mitochondria" ->
mit ##och ##ond ##ria) and that occurs at least --min_count times becomes a piece of its
own, the most frequent first (or the words of --words=FILE, one a line). The new pieces
are appended to vocab.txt (their ids follow the old ones, so every old id keeps its
row), and every parameter indexed by the vocabulary (the word table, an untied output
layer, the output bias) gets a row for each: the mean of the rows of the pieces the
word used to be split into, so the model starts out reading the new piece about as it
read the old split. WordPiece matches the longest piece first, so a new word is also
read as the start of a longer word ("mitochondrial" -> mitochondria ##l).

The output is an HF folder (the input's family, with vocab.txt and its model card) that
`init_from` and transformers load; `extend_vocab.json` in it lists the words added. A
SentencePiece, byte-level or tokenizer.json vocabulary is refused: a new vocabulary for
those is trained from scratch (`python -m pretrainx.tokenizer train`), as SciBERT did.
"""

import argparse
import collections
import dataclasses
import glob
import json
import os
import tempfile

import jax
import numpy as np

from pretrainx import interop
from pretrainx.data.wordpiece import WordPieceTokenizer
from pretrainx.errors import UserError, json_command

RECORD = "extend_vocab.json"


def frequent_split_words(tokenizer: WordPieceTokenizer, files: list, count: int,
                         min_count: int) -> list:
    """The `count` most frequent words of `files` (BERT's pre-tokenisation) that
    `tokenizer` splits into several pieces and that occur at least `min_count` times;
    ties by the word, so the choice is the same on every run."""
    counts = collections.Counter()
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                counts.update(tokenizer.words(line))
    split = [(n, w) for w, n in counts.items()
             if n >= min_count and len(tokenizer.word_ids(w)) > 1]
    return [w for n, w in sorted(split, key=lambda nw: (-nw[0], nw[1]))[:count]]


def grown(array: np.ndarray, axis: int, pieces: list) -> np.ndarray:
    """`array` with one slice appended along `axis` (its vocabulary axis) per entry of
    `pieces`: the mean of the slices at those old ids."""
    array = np.asarray(array)
    new = [np.take(array, ids, axis=axis).mean(axis=axis, keepdims=True) for ids in pieces]
    return np.concatenate([array] + new, axis=axis).astype(array.dtype)


def extend_params(params: dict, vocab_size: int, pieces: list, start: int) -> dict:
    """Every leaf with an axis of `vocab_size` rows grown to `start + len(pieces)` rows:
    rows up to `start` kept, rows from `start` to `vocab_size` (a table padded past
    the tokenizer) dropped, the new ones the mean of their old pieces' rows."""
    def one(path, leaf):
        axes = [a for a, n in enumerate(np.shape(leaf)) if n == vocab_size]
        if len(axes) > 1:
            raise UserError(f"parameter {path} has {np.shape(leaf)}: more than one axis of "
                            f"the vocabulary's {vocab_size} rows, so which to grow is unclear")
        if not axes:
            return leaf
        kept = np.take(np.asarray(leaf), np.arange(start), axis=axes[0])
        return grown(kept, axes[0], pieces)
    return jax.tree_util.tree_map_with_path(
        lambda path, leaf: one(jax.tree_util.keystr(path), leaf), params)


def extend(init_from: str, output: str, corpus: str = "", new_words: int = 1000,
           min_count: int = 5, words_file: str = "") -> dict:
    """Write `output`: the model at `init_from` with its vocabulary extended (see the
    module docstring); returns what was done."""
    if os.path.isdir(output) and os.listdir(output):
        raise UserError(f"output directory {output} is not empty")
    pretrained = interop.load(init_from)
    if not pretrained.tokenizer.endswith(".txt"):
        raise UserError(f"{init_from}'s tokenizer {pretrained.tokenizer} is not a WordPiece "
                        "vocab.txt: extend_vocab extends WordPiece vocabularies; train a new "
                        "vocabulary for a SentencePiece or byte-level one")
    tokenizer = WordPieceTokenizer(pretrained.tokenizer, lower_case=pretrained.lower_case)
    words = _words(tokenizer, corpus, new_words, min_count, words_file)
    pieces = [list(tokenizer.word_ids(w)) for w in words]
    model = pretrained.model
    params = extend_params(pretrained.params, int(model.vocab_size), pieces,
                           tokenizer.vocab_size)
    new_size = tokenizer.vocab_size + len(words)
    with tempfile.TemporaryDirectory() as scratch:
        vocab = os.path.join(scratch, "vocab.txt")
        with open(vocab, "w", encoding="utf-8") as f:
            f.write("".join(p + "\n" for p in tokenizer.pieces() + words))
        model = model.copy_and_resolve_references()
        model.vocab_size = new_size
        extended = dataclasses.replace(pretrained, params=params, tokenizer=vocab, model=model)
        interop.hf.save(extended, output)
    record = {"from": init_from, "words_added": len(words), "vocab_size": new_size,
              "words": words}
    with open(os.path.join(output, RECORD), "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1, ensure_ascii=False)
    return {k: v for k, v in record.items() if k != "words"}


def _words(tokenizer, corpus: str, new_words: int, min_count: int, words_file: str) -> list:
    if words_file:
        with open(words_file, encoding="utf-8") as f:
            listed = [w.strip() for w in f if w.strip()]
        words = []
        for listed_word in listed:
            normalised = tokenizer.words(listed_word)
            if len(normalised) != 1:
                raise UserError(f"{words_file}: {listed_word!r} is {len(normalised)} words to "
                                "BERT's pre-tokenisation, not one")
            if len(tokenizer.word_ids(normalised[0])) == 1:
                raise UserError(f"{words_file}: {listed_word!r} is one piece of the "
                                "vocabulary already")
            words.append(normalised[0])
        return list(dict.fromkeys(words))
    files = sorted(f for pattern in corpus.split(",") if pattern.strip()
                   for f in glob.glob(os.path.expanduser(pattern.strip())))
    if not files:
        raise UserError(f"--corpus={corpus!r} names no files")
    words = frequent_split_words(tokenizer, files, new_words, min_count)
    if not words:
        raise UserError(f"no word of {corpus} occurs {min_count} times and is split into "
                        "several pieces: nothing to add")
    return words


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pretrainx.extend_vocab", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--init_from", required=True, help="an HF folder or a pretrainx workdir")
    parser.add_argument("--output", required=True, help="the new HF folder")
    parser.add_argument("--corpus", default="", help="comma-separated files or globs")
    parser.add_argument("--new_words", type=int, default=1000, help="words to add at most")
    parser.add_argument("--min_count", type=int, default=5, help="a word's least count")
    parser.add_argument("--words", default="", help="a file of words to add, one a line")
    args = parser.parse_args(argv)
    return json_command(lambda: dict(extend(args.init_from, args.output, args.corpus,
                                            args.new_words, args.min_count, args.words),
                                     output=args.output))


if __name__ == "__main__":
    raise SystemExit(main())
