"""word2vec's skip-gram with negative sampling (Mikolov et al. 2013, "Distributed
Representations of Words and Phrases and their Compositionality").

Two tables of the vocabulary's size: the input vectors (the word vectors one exports),
drawn uniform in +-0.5/dim as word2vec.c draws syn0, and the output vectors, zeros as
its syn1neg. A (center, context) pair scores v_center . u_context; each pair brings
its own negatives, scored the same way. Both tables' rows are named `vocab`, so they
shard over the mesh as any vocabulary table does.
"""

import jax
import jax.numpy as jnp
import ml_collections
from flax import linen as nn

from pretrainx.models import layers


def default_config() -> ml_collections.ConfigDict:
    """word2vec.c's defaults for skip-gram: 100 dimensions, a window of 5, 5 negatives."""
    m = ml_collections.ConfigDict()
    m.family = "word2vec"
    m.vocab_size = 100_000  # set to the tokenizer's vocabulary by the recipe
    m.embedding_size = 100
    m.window = 5  # the largest distance of a context word (each center draws 1..window)
    m.negatives = 5  # noise words per (center, context) pair
    m.update(layers.compute_keys(attention=False))
    return m


def uniform(scale):
    """word2vec.c's and glove.c's start: uniform in +-scale."""
    return lambda key, shape, dtype=jnp.float32: jax.random.uniform(key, shape, dtype,
                                                                    -scale, scale)


class SkipGram(nn.Module):
    """Batch of centers [B, L], their contexts [B, L, 2W] and negatives [B, L, 2W, K]
    -> the scores of the positive and the negative pairs."""
    cfg: ml_collections.ConfigDict

    def setup(self):
        m = self.cfg
        self.inputs = layers.Embed(m.vocab_size, m.embedding_size,
                                   embedding_init=uniform(0.5 / m.embedding_size))
        self.outputs = layers.Embed(m.vocab_size, m.embedding_size,
                                    embedding_init=nn.initializers.zeros)

    def __call__(self, batch, deterministic: bool = True):
        del deterministic  # no dropout
        centers = self.inputs(batch["tokens"])
        positive = jnp.einsum("bld,blwd->blw", centers, self.outputs(batch["context_ids"]))
        negative = jnp.einsum("bld,blwkd->blwk", centers, self.outputs(batch["negative_ids"]))
        return {"positive_scores": positive, "negative_scores": negative}

    def word_vectors(self):
        """The input table: what word2vec.c writes out."""
        return self.inputs.embedding


class CBOW(SkipGram):
    """Continuous bag of words: a center's contexts [B, L, 2W] (pair_weights 1 where a
    context is in its window) -> h, the mean of their input vectors, scored against the
    center's output vector and its own K noise words' [B, L, K]. The tables are
    skip-gram's."""

    def __call__(self, batch, deterministic: bool = True):
        del deterministic  # no dropout
        weights = batch["pair_weights"][..., None].astype(jnp.float32)
        contexts = self.inputs(batch["context_ids"]) * weights
        h = contexts.sum(2) / jnp.maximum(weights.sum(2), 1.0)
        positive = jnp.einsum("bld,bld->bl", h, self.outputs(batch["tokens"]))
        negative = jnp.einsum("bld,blkd->blk", h, self.outputs(batch["negative_ids"]))
        return {"positive_scores": positive, "negative_scores": negative}


def flops_per_pair(m) -> float:
    """Forward and backward (3x) of one pair's dot products: the positive and K negatives."""
    return 3 * 2 * m.embedding_size * (1 + m.negatives)
