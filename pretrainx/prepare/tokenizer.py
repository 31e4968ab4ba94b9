"""Tokenizer command line: train a SentencePiece model, encode and decode text.

  python -m pretrainx.tokenizer train --input=GLOB[,GLOB] --vocab_size=N \
      --model_type=unigram|bpe|wordpiece --output=DIR_OR_PREFIX [--lower_case=true]
      [--style=bert|t5] [--max_sentences=N] [--user_symbols=[NLU],[NLG],[S2S]]

unigram and bpe write a SentencePiece model (T5 and ALBERT use unigram); wordpiece
writes DIR/vocab.txt as BERT's; words writes DIR/vocab.words, every word of the input
most frequent first (ELMo's; --vocab_size caps it, cased as the text is). --max_sentences samples that many lines of a
large corpus (uniformly, with a fixed seed). A multilingual vocabulary samples its
input per language, as XLM-R did: --input='de/*.txt;es/*.txt;...' --alpha=0.3 draws
--max_sentences lines, a language's share ~ its lines^alpha.
  python -m pretrainx.tokenizer encode --tokenizer=PATH < text > ids
  python -m pretrainx.tokenizer decode --tokenizer=PATH < ids > text
"""

from __future__ import annotations

import glob
import io
import os
import sys

from absl import app, flags

from pretrainx.data import words
from pretrainx.data.tokenizer_training import temperature_sample
from pretrainx.data.tokenizers import load_tokenizer, train_sentencepiece, train_wordpiece
from pretrainx.errors import UserError

FLAGS = flags.FLAGS
_COMMANDS = ("train", "encode", "decode")


def _define_flags() -> None:
    # Defined on demand so importing this module never clashes with other CLIs' flags.
    flags.DEFINE_string("input", None, "Comma-separated globs of UTF-8 text files (train); "
                        "';' separates sources (languages) for --alpha.")
    flags.DEFINE_float("alpha", 0.0, "Temperature sampling of the ';'-separated sources "
                       "(train, unigram/bpe): lines drawn ~ lines^alpha (XLM-R: 0.3); "
                       "0: every line once.")
    flags.DEFINE_integer("vocab_size", None, "Number of pieces (train).")
    flags.DEFINE_enum("model_type", "unigram", ["unigram", "bpe", "wordpiece", "words"],
                      "unigram/bpe: a SentencePiece model; wordpiece: a BERT vocab.txt; "
                      "words: ELMo's word list, most frequent first (train).")
    flags.DEFINE_integer("max_sentences", 2_000_000,
                         "Lines sampled from the input for training (train).")
    flags.DEFINE_string("output", None, "Directory (gets spiece.model) or file prefix (train).")
    flags.DEFINE_bool("lower_case", True, "Lower-case text (train; WordPiece encode/decode).")
    flags.DEFINE_enum("style", "bert", ["bert", "t5"],
                      "Special pieces (train): bert = [PAD] [UNK] [CLS] [SEP] [MASK]; "
                      "t5 = <pad> </s> <unk> as T5's spiece.model (sentinels are added "
                      "above the vocabulary by the T5 objective).")
    flags.DEFINE_list("user_symbols", [], "Pieces kept whole wherever the text spells them "
                      "(train, unigram/bpe): UL2's mode tokens [NLU],[NLG],[S2S].")
    flags.DEFINE_string("tokenizer", None, "vocab.txt, .model, or a directory holding one (encode/decode).")


def _expand_globs(spec: str) -> list[str]:
    files = []
    for pattern in filter(None, (p.strip() for p in spec.split(","))):
        matches = sorted(glob.glob(os.path.expanduser(pattern)))
        if not matches:
            raise UserError(f"--input glob matches no files: {pattern}")
        files.extend(matches)
    if not files:
        raise UserError("--input is empty")
    return files


def _output_prefix(output: str) -> str:
    """A directory (existing, or spelled with a trailing slash) gets DIR/spiece."""
    output = os.path.expanduser(output)
    if os.path.isdir(output) or output.endswith(("/", os.sep)):
        return os.path.join(output, "spiece")
    return output[: -len(".model")] if output.endswith(".model") else output


def _require(name: str):
    value = getattr(FLAGS, name)
    if value is None:
        raise UserError(f"--{name} is required")
    return value


def _train() -> None:
    if FLAGS.max_sentences < 1:
        raise UserError(f"--max_sentences={FLAGS.max_sentences} must be positive")
    if FLAGS.model_type == "words":
        output = os.path.expanduser(_require("output"))
        if not output.endswith(".words"):
            output = os.path.join(output, "vocab.words")
        count = words.build_vocab(_expand_globs(_require("input")), output,
                                  max_words=FLAGS.vocab_size)
        print(f"{output} ({count} words)")
        return
    if FLAGS.model_type == "wordpiece":
        output = os.path.expanduser(_require("output"))
        if output.endswith(".txt"):
            output = os.path.dirname(output) or "."
        print(train_wordpiece(_expand_globs(_require("input")), output,
                              vocab_size=_require("vocab_size"), lower_case=FLAGS.lower_case,
                              max_sentences=FLAGS.max_sentences))
        return
    groups = [_expand_globs(g) for g in _require("input").split(";") if g.strip()]
    lines = None
    if FLAGS.alpha:
        lines, report = temperature_sample(groups, FLAGS.alpha, FLAGS.max_sentences)
        for r in report:
            print(f"{','.join(os.path.basename(f) for f in r['files'])}: {r['lines']} lines, "
                  f"share {r['share']:.3f}, {r['drawn']} drawn", file=sys.stderr)
    path = train_sentencepiece(
        [f for g in groups for f in g],
        _output_prefix(_require("output")),
        vocab_size=_require("vocab_size"),
        model_type=FLAGS.model_type,
        lower_case=FLAGS.lower_case,
        style=FLAGS.style,
        max_sentences=FLAGS.max_sentences,
        lines=lines,
        user_symbols=FLAGS.user_symbols,
    )
    print(path)


def _stdin_lines():
    """Input lines without line ends; a leading BOM is not text."""
    stream = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace", newline=None)
    for n, line in enumerate(stream):
        yield line.rstrip("\n").lstrip("\ufeff") if n == 0 else line.rstrip("\n")


def _load():
    return load_tokenizer(_require("tokenizer"), lower_case=FLAGS.lower_case)


def _encode() -> None:
    tok = _load()
    out = sys.stdout
    for line in _stdin_lines():
        out.write(" ".join(map(str, tok.encode(line))) + "\n")


def _parse_ids(line: str, lineno: int) -> list[int]:
    try:
        return [int(t) for t in line.split()]
    except ValueError:
        raise UserError(f"stdin line {lineno}: expected space-separated integer ids, got {line[:80]!r}") from None


def _decode() -> None:
    tok = _load()
    out = sys.stdout
    for lineno, line in enumerate(_stdin_lines(), 1):
        out.write(tok.decode(_parse_ids(line, lineno)) + "\n")


def main(argv: list[str]) -> None:
    if len(argv) != 2 or argv[1] not in _COMMANDS:
        got = " ".join(argv[1:]) or "nothing"
        print(f"error: expected one command ({', '.join(_COMMANDS)}), got {got}", file=sys.stderr)
        sys.exit(2)
    sys.stdout.reconfigure(encoding="utf-8")
    try:
        {"train": _train, "encode": _encode, "decode": _decode}[argv[1]]()
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


def run() -> None:
    _define_flags()
    app.run(main)


if __name__ == "__main__":
    run()
