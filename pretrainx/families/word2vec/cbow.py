"""word2vec's continuous bag of words (-cbow 1) with negative sampling.

Skip-gram's data (the same vocabulary counts, subsampling, sentences packed with
segment ids, each center's window half-width drawn from 1..window); what differs is
the prediction: the mean h of a center's context input vectors scores the center's
output vector (-log sigma(h.u_c)) and K noise words drawn for the center from
unigram^0.75 (-log sigma(-h.u_n); a noise word equal to the center is not counted, as
word2vec.c skips it). A center without a context word in its sentence is not counted.
The loss is the mean over the batch's centers.

Drift from word2vec.c, named: it adds the whole error vector to each context word's
input vector, though h is their mean; the gradient of the mean gives each 1/count of
it, as gensim does with its default cbow_mean=1.
"""

import numpy as np

from pretrainx.families.word2vec import model as word2vec
from pretrainx.families.word2vec import skipgram


class CBOW(skipgram.SkipGram):
    flops_formula = "6 * E * (1 + K) + 2 * E * 2 * window, E = embedding_size, K = negatives"
    counted = "center_weights"  # one prediction a center (skip-gram's loss, per center)

    def __init__(self, cfg, tokenizer):
        super().__init__(cfg, tokenizer)
        self.model = word2vec.CBOW(cfg.model)

    def transform(self, phase, train: bool):
        length, m = phase.seq_len, self.cfg.model
        cdf = skipgram.noise_cdf(self.counts())

        def fn(row, rng):
            tokens, segments, contexts, weights = skipgram.windowed(row, length, m.window, rng)
            centers = (weights.sum(-1) > 0).astype(np.float32)
            noise = skipgram.draw_noise(cdf, (length, m.negatives), rng)
            noise_weights = (noise != tokens[:, None]) & (centers[:, None] > 0)
            return {"tokens": tokens, "segment_ids": segments, "context_ids": contexts,
                    "pair_weights": weights, "center_weights": centers,
                    "negative_ids": noise, "negative_weights": noise_weights.astype(np.float32)}

        return fn

    def example_batch(self, batch_size: int, phase) -> dict:
        m, shape = self.cfg.model, (batch_size, phase.seq_len)
        return {"tokens": np.zeros(shape, np.int32), "segment_ids": np.ones(shape, np.int32),
                "context_ids": np.zeros(shape + (2 * m.window,), np.int32),
                "pair_weights": np.ones(shape + (2 * m.window,), np.float32),
                "center_weights": np.ones(shape, np.float32),
                "negative_ids": np.zeros(shape + (m.negatives,), np.int32),
                "negative_weights": np.ones(shape + (m.negatives,), np.float32)}

    def flops_per_token(self, phase) -> float:
        m = self.cfg.model
        return word2vec.flops_per_pair(m) + 3 * 2 * m.embedding_size * 2 * m.window

    def batch_stats(self, batch) -> dict:
        stats = super().batch_stats(batch)
        stats["centers"] = int(batch["center_weights"].sum())
        return stats
