"""GloVe's objective: weighted least squares on a corpus's co-occurrence counts, as glove.c
(cooccur, shuffle, glove) trains them.

The vocabulary is word2vec's (counted over the training documents; special ids, ids past
the table and words rarer than data.min_count leave the text). In each sentence, with
those words removed, every pair of words at distance d <= model.window adds 1/d to
X_ij and to X_ji (glove.c's symmetric window, which stops at a line's end). The nonzero
entries are shuffled once (glove.c's shuffle) and cut into rows of seq_len entries; an
epoch is one pass over them. An entry costs 0.5 f(X_ij) (w_i . c_j + b_i + b~_j -
log X_ij)^2, f(x) = min(1, x / x_max)^alpha. The loss a step differentiates is the
batch's summed cost, as glove.c's AdaGrad steps once per entry on its own cost (the
drift is in the spec); `cost` is it per entry, the figure glove.c prints. Eval: the cost
of the eval text's co-occurrence counts, over the training vocabulary.
"""

import jax.numpy as jnp
import numpy as np

from pretrainx.data import corpus
from pretrainx.families.glove import model as glove
from pretrainx.families.word2vec import skipgram


def cooccurrence(sentences, window: int, vocab_size: int) -> tuple:
    """(word ids, context ids, counts) of the nonzero entries of X over `sentences` (id
    arrays): a pair at distance d within a sentence adds 1/d both ways."""
    sentences = [np.asarray(s, np.int64) for s in sentences if len(s) > 1]
    if not sentences:
        empty = np.zeros(0, np.int64)
        return empty, empty, np.zeros(0, np.float64)
    tokens = np.concatenate(sentences)
    segment = np.repeat(np.arange(len(sentences)), [s.size for s in sentences])
    keys, weights = [], []
    for d in range(1, window + 1):
        same = segment[:-d] == segment[d:]
        a, b = tokens[:-d][same], tokens[d:][same]
        keys += [a * vocab_size + b, b * vocab_size + a]
        weights += [np.full(2 * a.size, 1.0 / d)]
    keys = np.concatenate(keys)
    unique, inverse = np.unique(keys, return_inverse=True)
    counts = np.bincount(inverse, weights=np.concatenate(weights))
    return unique // vocab_size, unique % vocab_size, counts


class GloVeObjective:
    flops_formula = "6 * E, E = embedding_size (an entry's dot product, forward and backward)"
    token_features = ("word_ids",)  # a "token" is a co-occurrence entry

    def __init__(self, cfg, tokenizer):
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.model = glove.GloVe(cfg.model)
        self.corpus = corpus.Corpus(cfg, tokenizer)
        self._counts = None

    def describe(self, phase) -> dict:
        m = self.cfg.model
        return {"entries_per_row": phase.seq_len, "window": m.window, "x_max": m.x_max,
                "alpha": m.alpha}

    def counts(self) -> np.ndarray:
        """Counts of the ids that train ([vocab_size]; 0 for every id left out)."""
        if self._counts is None:
            self._counts = skipgram.vocabulary_counts(self.cfg, self.corpus, self.tokenizer)
        return self._counts

    # ---- data -------------------------------------------------------------
    def examples(self, spec, phase, train: bool) -> list:
        """One source's entries: counted over all its documents at once (X sums over the
        corpus, so the documents are not cut into shards)."""
        self.counts()  # before reading a source for itself: refuses prepared data
        return self.examples_from_documents(self.corpus.split_documents(spec, train), phase,
                                            train)

    def examples_from_documents(self, docs, phase, train: bool, group: int = 0) -> list:
        counts = self.counts()
        sentences = []
        for doc in docs:
            for sentence in doc:
                ids = np.asarray(sentence, np.int64)
                ids = ids[ids < counts.size]
                sentences.append(ids[counts[ids] > 0])
        words, contexts, x = cooccurrence(sentences, self.cfg.model.window, counts.size)
        if train:  # glove.c's shuffle: once, before the first epoch
            order = np.random.default_rng([self.cfg.seed, group]).permutation(x.size)
            words, contexts, x = words[order], contexts[order], x[order]
        n = phase.seq_len
        return [{"word_ids": words[i:i + n].astype(np.int32),
                 "context_ids": contexts[i:i + n].astype(np.int32),
                 "counts": x[i:i + n].astype(np.float32)} for i in range(0, x.size, n)]

    def transform(self, phase, train: bool):
        def fn(row, rng):
            """A row padded to seq_len: padding has weight 0 (and a count of 1, log 0)."""
            del rng  # nothing is drawn
            n = row["counts"].size
            out = {k: v[0] for k, v in self.example_batch(1, phase).items()}
            out["entry_weights"][n:] = 0.0
            for key in ("word_ids", "context_ids", "counts"):
                out[key][:n] = row[key]
            return out

        return fn

    def example_batch(self, batch_size: int, phase) -> dict:
        shape = (batch_size, phase.seq_len)
        return {"word_ids": np.zeros(shape, np.int32), "context_ids": np.zeros(shape, np.int32),
                "counts": np.ones(shape, np.float32), "entry_weights": np.ones(shape, np.float32)}

    # ---- loss -------------------------------------------------------------
    def loss_sums(self, outputs, batch) -> dict:
        m, real = self.cfg.model, batch["entry_weights"]
        x = jnp.where(real > 0, batch["counts"], 1.0)
        diff = outputs["predictions"].astype(jnp.float32) - jnp.log(x)
        cost = 0.5 * glove.weighting(x, m.x_max, m.alpha) * diff ** 2 * real
        return {"loss_sum": jnp.sum(cost), "entry_sum": jnp.sum(real),
                "squared_error_sum": jnp.sum(diff ** 2 * real)}

    def normalizers(self, batch) -> dict:
        return {"entries": jnp.maximum(jnp.sum(batch["entry_weights"]), 1.0)}

    def loss(self, sums, norms):
        return sums["loss_sum"]  # summed over the entries: see the module's docstring

    def metrics(self, sums, norms) -> dict:
        return {"cost": sums["loss_sum"] / norms["entries"],
                "log_count_rmse": jnp.sqrt(sums["squared_error_sum"] / norms["entries"])}

    def eval_metrics(self, totals) -> dict:
        entries = max(float(totals["entry_sum"]), 1.0)
        cost = float(totals["loss_sum"]) / entries
        return {"loss": cost, "cost": cost,
                "log_count_rmse": float(np.sqrt(float(totals["squared_error_sum"]) / entries))}

    def flops_symbols(self, phase) -> dict:
        return {}

    def flops_per_token(self, phase) -> float:
        return glove.flops_per_entry(self.cfg.model)

    # ---- statistics (python -m pretrainx.data --stats) ----------------------
    def batch_stats(self, batch) -> dict:
        real = batch["entry_weights"] > 0
        return {"rows": real.shape[0], "all_entries": real.size, "entries": int(real.sum()),
                "count_sum": float(batch["counts"][real].sum())}

    def summarize_stats(self, totals, phase) -> dict:
        entries = max(totals["entries"], 1)
        return {"entry_fraction": totals["entries"] / max(totals["all_entries"], 1),
                "mean_count": totals["count_sum"] / entries, "entries_per_row": phase.seq_len}

    def show(self, batch, count: int) -> list:
        word = self.tokenizer.decode
        texts = []
        for r in range(min(count, batch["word_ids"].shape[0])):
            entries = zip(batch["word_ids"][r], batch["context_ids"][r], batch["counts"][r],
                          batch["entry_weights"][r])
            texts.append(f"--- row {r}\n" + "\n".join(
                f"{word([int(i)])} {word([int(j)])} {x:.3f}" for i, j, x, w in entries if w > 0))
        return texts
