"""A word2vec run's word vectors in word2vec.c's files: `python -m pretrainx.export
--workdir=RUN --output=DIR` writes DIR/vectors.txt (text: a "count dim" line, then a
word and its numbers per line) and DIR/vectors.bin (the same header, then each word,
a space and its float32s), which gensim's `KeyedVectors.load_word2vec_format` reads.

The words written are the ones that trained, in the vocabulary's order: word2vec.c
writes its vocabulary after min-count, and here a word that never entered a batch (left
out of the text as rare, special or beyond the table, or not reached yet) keeps an
output vector of exact zeros (it was never a context nor drawn as noise), so a nonzero
output row marks a word that trained.
"""

import os

import numpy as np

from pretrainx.data.tokenizers import load_tokenizer
from pretrainx.errors import UserError

FILES = ("vectors.txt", "vectors.bin")


def trained_words(pretrained) -> tuple:
    """(words, their input vectors [n, dim] float32) of a word2vec `Pretrained`."""
    tokenizer = load_tokenizer(pretrained.tokenizer, lower_case=pretrained.lower_case)
    inputs = np.asarray(pretrained.params["inputs"]["embedding"], np.float32)
    outputs = np.asarray(pretrained.params["outputs"]["embedding"], np.float32)
    size = min(tokenizer.vocab_size, inputs.shape[0])
    trained = np.any(outputs[:size] != 0, axis=1)
    trained[tokenizer.special_ids()] = False
    ids = np.flatnonzero(trained)
    if not ids.size:
        raise UserError(f"{pretrained.source}: no word has trained yet (every output vector "
                        "is still zero)")
    return [word_of(tokenizer, int(i)) for i in ids], inputs[ids]


def word_of(tokenizer, i: int) -> str:
    """The word of id i, with no whitespace inside (the files split on it)."""
    word = tokenizer.words[i] if hasattr(tokenizer, "words") else tokenizer.decode([i])
    return "_".join(word.split()) or f"<id_{i}>"


def write(folder: str, words, vectors) -> list:
    """Both files of word2vec.c's formats into `folder` (new or empty)."""
    if os.path.isdir(folder) and os.listdir(folder):
        raise UserError(f"output directory {folder} is not empty")
    os.makedirs(folder, exist_ok=True)
    header = f"{len(words)} {vectors.shape[1]}\n"
    with open(os.path.join(folder, FILES[0]), "w", encoding="utf-8") as f:
        f.write(header)
        for word, vector in zip(words, vectors):
            f.write(word + " " + " ".join(f"{x:.6f}" for x in vector) + "\n")
    with open(os.path.join(folder, FILES[1]), "wb") as f:
        f.write(header.encode("utf-8"))
        for word, vector in zip(words, vectors):
            f.write(word.encode("utf-8") + b" " + vector.astype("<f4").tobytes() + b"\n")
    return list(FILES)


def export(pretrained, output: str) -> list:
    """The family's export (registry.Family.export): the trained words' vectors."""
    words, vectors = trained_words(pretrained)
    return write(output, words, vectors)
