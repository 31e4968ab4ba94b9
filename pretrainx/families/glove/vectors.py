"""A GloVe run's word vectors: `python -m pretrainx.export --workdir=RUN --output=DIR` writes
DIR/glove.txt (GloVe's text format: a word and its numbers per line, no header; gensim
reads it with `load_word2vec_format(path, no_header=True)`) and word2vec.c's
vectors.txt and vectors.bin (with their header). A word's vector is w + c, glove.c's
default output (-model 2); the words written are those that were in an entry (a nonzero
context bias), in the vocabulary's order.
"""

import os

import numpy as np

from pretrainx.data.tokenizers import load_tokenizer
from pretrainx.errors import UserError
from pretrainx.families.word2vec import vectors as word2vec_vectors

GLOVE_FILE = "glove.txt"


def trained_words(pretrained) -> tuple:
    """(words, w + c [n, dim] float32) of a GloVe `Pretrained`."""
    tokenizer = load_tokenizer(pretrained.tokenizer, lower_case=pretrained.lower_case)
    p = pretrained.params
    summed = np.asarray(p["words"]["embedding"], np.float32) + \
        np.asarray(p["contexts"]["embedding"], np.float32)
    size = min(tokenizer.vocab_size, summed.shape[0])
    trained = np.asarray(p["context_bias"]["embedding"])[:size, 0] != 0
    trained[tokenizer.special_ids()] = False
    ids = np.flatnonzero(trained)
    if not ids.size:
        raise UserError(f"{pretrained.source}: no word has trained yet (every context bias "
                        "is still zero)")
    return [word2vec_vectors.word_of(tokenizer, int(i)) for i in ids], summed[ids]


def export(pretrained, output: str) -> list:
    """The family's export (registry.Family.export): glove.txt and word2vec's two files."""
    words, vectors = trained_words(pretrained)
    written = word2vec_vectors.write(output, words, vectors)
    with open(os.path.join(output, GLOVE_FILE), "w", encoding="utf-8") as f:
        for word, vector in zip(words, vectors):
            f.write(word + " " + " ".join(f"{x:.6f}" for x in vector) + "\n")
    return [GLOVE_FILE] + written
