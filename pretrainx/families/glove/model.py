"""GloVe (Pennington, Socher and Manning 2014): word and context vectors with a bias each,
fitted to the log co-occurrence counts by weighted least squares.

Four tables of the vocabulary's size: word vectors W, context vectors C and their
biases, drawn uniform in +-0.5/dim as glove.c draws them, but the context biases start
at 0 (glove.c's are drawn too): a word that was in any entry has a nonzero one after
training, which is how the export tells the trained words. A co-occurrence entry
(i, j) predicts w_i . c_j + b_i + b~_j for log X_ij. The rows of every table are named
`vocab`, so they shard over the mesh as any vocabulary table does. The exported vector
of a word is w + c (glove.c's default, -model 2).
"""

import jax.numpy as jnp
import ml_collections
from flax import linen as nn

from pretrainx.families.word2vec import model as word2vec
from pretrainx.models import layers


def default_config() -> ml_collections.ConfigDict:
    """The paper's: x_max 100, alpha 3/4, a symmetric window of 10 words."""
    m = ml_collections.ConfigDict()
    m.family = "glove"
    m.vocab_size = 400_000  # set to the tokenizer's vocabulary by the recipe
    m.embedding_size = 300
    m.window = 10  # words each side; a pair at distance d adds 1/d to X
    m.x_max = 100.0  # f(x) = min(1, (x / x_max)^alpha)
    m.alpha = 0.75
    m.update(layers.compute_keys(attention=False))
    return m


class GloVe(nn.Module):
    """Entries' word ids [B, L] and context ids [B, L] -> their predicted log counts."""
    cfg: ml_collections.ConfigDict

    def setup(self):
        m = self.cfg
        init = word2vec.uniform(0.5 / m.embedding_size)
        self.words = layers.Embed(m.vocab_size, m.embedding_size, embedding_init=init)
        self.contexts = layers.Embed(m.vocab_size, m.embedding_size, embedding_init=init)
        self.word_bias = layers.Embed(m.vocab_size, 1, embedding_init=init)
        self.context_bias = layers.Embed(m.vocab_size, 1,
                                         embedding_init=nn.initializers.zeros)

    def __call__(self, batch, deterministic: bool = True):
        del deterministic  # no dropout
        w, c = self.words(batch["word_ids"]), self.contexts(batch["context_ids"])
        bias = self.word_bias(batch["word_ids"])[..., 0] + \
            self.context_bias(batch["context_ids"])[..., 0]
        return {"predictions": jnp.einsum("bld,bld->bl", w, c) + bias}


def weighting(counts, x_max: float, alpha: float):
    """f(X) = (X / x_max)^alpha below x_max, 1 from it (0 where X is 0)."""
    return jnp.minimum(counts / x_max, 1.0) ** alpha


def flops_per_entry(m) -> float:
    """Forward and backward (3x) of one entry's dot product."""
    return 3 * 2 * m.embedding_size
