"""The ids a model folder's users get: its tokenizer.json, when it has one, is the truth.

A family reads its own tokenizer file of a folder (vocab.txt, vocab.json, spiece.model,
sentencepiece.bpe.model ...: a HuggingFace model's, or a folder given as data.tokenizer),
but transformers 5 loads the folder's
tokenizer.json when there is one, and the two can disagree: an XLM-R folder whose
SentencePiece model has a pad piece is shifted by one in transformers (every piece
read one row off, silently); ALBERT's tokenizer strips accents that its SentencePiece
model keeps. Before a model is read, the family's file and tokenizer.json encode the
same real text; where they differ, a SentencePiece model gives way to tokenizer.json
(the ids the folder's model was trained and is used with), and any other file is
refused in one line.
"""

import os

from pretrainx.data.fast_tokenizer import FastTokenizer
from pretrainx.errors import UserError

_BOOK = os.path.join(os.path.dirname(os.path.dirname(__file__)), "assets", "text",
                     "pg11_alice_in_wonderland.txt")
# Words with accents and other scripts, where normalisers differ (ALBERT strips accents)
_WORDS = "Café naïve Größe São Paulo Dvořák Ελλάδα Москва 東京 1984 — “quoted” don't"


def sample() -> list:
    """Lines of real text to compare tokenizers on: a stretch of Alice and _WORDS."""
    with open(_BOOK, encoding="utf-8") as f:
        text = f.read()[5000:9000]
    return [line for line in text.splitlines() if line.strip()] + [_WORDS]


def _first_difference(ours, theirs) -> str | None:
    """Where `ours` (a pretrainx Tokenizer) and `theirs` (a tokenizers.Tokenizer) part:
    one sentence, or None when they give the same ids and special ids."""
    for line in sample():
        mine, truth = ours.encode(line), theirs.encode(line, add_special_tokens=False).ids
        if mine != truth:
            at = next((i for i, (a, b) in enumerate(zip(mine, truth)) if a != b),
                      min(len(mine), len(truth)))
            return (f"{line[:40]!r} is {mine[at:at + 4]} from token {at} there and "
                    f"{truth[at:at + 4]} in tokenizer.json")
    for name in ("cls_id", "sep_id", "pad_id", "unk_id", "mask_id"):
        i = getattr(ours, name, -1)
        if i >= 0 and theirs.token_to_id(ours.id_to_piece(i)) not in (i, None):
            piece = ours.id_to_piece(i)
            return f"{piece} is {i} there and {theirs.token_to_id(piece)} in tokenizer.json"
    return None


def agreeing(folder: str, chosen: str, read_chosen) -> str:
    """The tokenizer file to read `folder`'s model with: `chosen` (the family's pick;
    `read_chosen()` reads it as the family does, called only where there is something to
    compare) if it gives tokenizer.json's ids or the folder has none; tokenizer.json in
    place of a SentencePiece model that disagrees; else a UserError."""
    truth_file = os.path.join(folder, "tokenizer.json")
    if not os.path.isfile(truth_file) or os.path.abspath(chosen) == os.path.abspath(truth_file):
        return chosen
    import tokenizers
    try:
        theirs = tokenizers.Tokenizer.from_file(truth_file)
    except Exception as e:  # the library's errors are plain Exceptions
        raise UserError(f"cannot read {truth_file}: {str(e).splitlines()[0][:200]}") from None
    difference = _first_difference(read_chosen(), theirs)
    if difference is None:
        return chosen
    said = f"{folder}: {os.path.basename(chosen)} and tokenizer.json give other ids ({difference})"
    if not chosen.endswith(".model"):
        raise UserError(f"{said}; remove the file that is wrong")
    try:
        FastTokenizer(truth_file)  # the special tokens a run needs are named in it
    except UserError as e:
        raise UserError(f"{said}, and tokenizer.json cannot stand in for it: {e}") from None
    return truth_file
