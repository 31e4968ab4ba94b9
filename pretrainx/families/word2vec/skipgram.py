"""word2vec's skip-gram objective with negative sampling, as word2vec.c trains it.

The vocabulary's counts come from the train sources (one pass, the same in every
process): words rarer than `data.min_count`, special ids and ids beyond
`model.vocab_size` leave the text, as word2vec.c's vocabulary reduction drops them.
Frequent words are subsampled when examples are built (word2vec.c's rule: a word of
count f among T kept with probability (sqrt(f / (s T)) + 1) s T / f, s =
`data.subsample`). A sentence never lends context to another: rows pack sentences
with segment ids, and a pair needs both words in one sentence (word2vec.c's windows
stop at a line's end). Each center draws its window's half-width from 1..window, and
each (center, context) pair draws `model.negatives` noise words from unigram^0.75
(a noise word equal to the context is not counted, as word2vec.c skips it). A pair's
loss is -log sigma(v.u) - sum over its noise of log sigma(-v.u'); the loss is its mean
over the batch's pairs (word2vec.c steps once per pair: see the spec for the rate).
"""

import jax
import jax.numpy as jnp
import numpy as np

from pretrainx.data import corpus, sources
from pretrainx.errors import UserError
from pretrainx.families.word2vec import model as word2vec


def keep_probabilities(counts: np.ndarray, sample: float) -> np.ndarray:
    """word2vec.c's subsampling: the probability each id is kept (1 where sample is 0)."""
    counts = np.asarray(counts, np.float64)
    if not sample:
        return np.ones_like(counts)
    threshold = sample * counts.sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        keep = (np.sqrt(counts / threshold) + 1) * threshold / counts
    return np.where(counts > 0, np.minimum(keep, 1.0), 0.0)


def noise_cdf(counts: np.ndarray, power: float = 0.75) -> np.ndarray:
    """The cumulative unigram^power distribution negatives are drawn from."""
    weights = np.asarray(counts, np.float64) ** power
    return np.cumsum(weights / weights.sum())


def vocabulary_counts(cfg, reader, tokenizer) -> np.ndarray:
    """Counts of the ids that train ([model.vocab_size]) over the train sources' training
    documents (`reader`: their corpus.Corpus): 0 for special ids, ids past the table and
    words rarer than data.min_count, as word2vec.c's and glove.c's vocabularies drop them."""
    if cfg.data.prepared_dir:
        raise UserError(f"{cfg.objective} counts its vocabulary from text: "
                        "data.prepared_dir is not read by this objective; set data.train_files")
    size = cfg.model.vocab_size
    ids = np.concatenate([np.asarray(sentence, np.int64).ravel()
                          for spec in sources.split_sources(cfg.data.train_files)
                          for doc in reader.split_documents(spec, True)
                          for sentence in doc] or [np.zeros(0, np.int64)])
    counts = np.bincount(ids[ids < size], minlength=size)
    counts[tokenizer.special_ids()] = 0
    counts[counts < cfg.data.min_count] = 0
    if not counts.any():
        raise UserError(f"no word of {cfg.data.train_files} occurs "
                        f"data.min_count={cfg.data.min_count} times")
    return counts


def pack_sentences(sentences, length: int) -> list:
    """Sentences (id arrays) -> rows of `length` ids with 1-based segment ids; a sentence
    longer than a row is cut into pieces, each its own segment."""
    rows, tokens, segments = [], [], []
    for sentence in sentences:
        for start in range(0, len(sentence), length):
            piece = sentence[start:start + length]
            if len(tokens) + len(piece) > length:
                rows.append((tokens, segments))
                tokens, segments = [], []
            segment = (segments[-1] + 1) if segments else 1
            tokens += list(piece)
            segments += [segment] * len(piece)
    if tokens:
        rows.append((tokens, segments))
    return [{"tokens": np.asarray(t, np.int32), "segment_ids": np.asarray(s, np.int32)}
            for t, s in rows]


def window_pairs(segment_ids: np.ndarray, half_widths: np.ndarray, window: int):
    """(context positions [L, 2W], weights [L, 2W]): each center's contexts at offsets
    -W..-1, 1..W that lie within its drawn half-width and its own sentence."""
    length = segment_ids.size
    offsets = np.concatenate([np.arange(-window, 0), np.arange(1, window + 1)])
    at = np.arange(length)[:, None] + offsets[None, :]
    inside = (at >= 0) & (at < length)
    at = np.clip(at, 0, length - 1)
    same = (segment_ids[at] == segment_ids[:, None]) & (segment_ids[:, None] > 0)
    near = np.abs(offsets)[None, :] <= half_widths[:, None]
    return at, (inside & same & near).astype(np.float32)


def windowed(row: dict, length: int, window: int, rng) -> tuple:
    """(tokens, segment ids, context ids [L, 2W], pair weights [L, 2W]) of a packed row
    padded to `length`, each center's window half-width drawn from 1..window."""
    tokens = np.zeros(length, np.int32)
    segments = np.zeros(length, np.int32)
    tokens[:row["tokens"].size] = row["tokens"]
    segments[:row["segment_ids"].size] = row["segment_ids"]
    half = rng.integers(1, window + 1, size=length)
    at, weights = window_pairs(segments, half, window)
    contexts = np.where(weights > 0, tokens[at], 0).astype(np.int32)
    return tokens, segments, contexts, weights


def draw_noise(cdf: np.ndarray, shape: tuple, rng) -> np.ndarray:
    """Noise word ids of `shape` drawn from the cumulative distribution `cdf`."""
    noise = np.searchsorted(cdf, rng.random(shape), side="right").astype(np.int32)
    return np.minimum(noise, cdf.size - 1)


class SkipGram:
    flops_formula = ("6 * E * (1 + K) * (window + 1), E = embedding_size, K = negatives "
                     "per pair, window + 1 = the pairs a center has on average")
    token_features = ("tokens",)
    counted = "pair_weights"  # the batch's weights of what one prediction is: a pair

    def __init__(self, cfg, tokenizer):
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.model = word2vec.SkipGram(cfg.model)
        self.corpus = corpus.Corpus(cfg, tokenizer)
        self._counts = None

    def describe(self, phase) -> dict:
        m = self.cfg.model
        return {"words_per_row": phase.seq_len, "window": m.window, "negatives": m.negatives}

    # ---- vocabulary ---------------------------------------------------------
    def counts(self) -> np.ndarray:
        """Counts of the ids that train ([vocab_size]; 0 for every id left out)."""
        if self._counts is None:
            self._counts = vocabulary_counts(self.cfg, self.corpus, self.tokenizer)
        return self._counts

    # ---- data -------------------------------------------------------------
    def examples(self, files, phase, train: bool) -> list:
        return self.corpus.examples(self, files, phase, train)

    def examples_from_documents(self, docs, phase, train: bool, group: int = 0) -> list:
        counts = self.counts()
        keep = keep_probabilities(counts, self.cfg.data.subsample if train else 0.0)
        key = [self.cfg.seed, phase.seq_len, int(train)] + ([group] if group else [])
        rng = np.random.default_rng(key)
        order = rng.permutation(len(docs)) if train else range(len(docs))
        sentences = []
        for d in order:
            for sentence in docs[d]:
                ids = np.asarray(sentence, np.int64)
                ids = ids[ids < counts.size]
                ids = ids[counts[ids] > 0]
                ids = ids[rng.random(ids.size) < keep[ids]]
                if ids.size > 1:
                    sentences.append(ids)
        return pack_sentences(sentences, phase.seq_len)

    def transform(self, phase, train: bool):
        length, m = phase.seq_len, self.cfg.model
        cdf = noise_cdf(self.counts())

        def fn(row, rng):
            tokens, segments, contexts, weights = windowed(row, length, m.window, rng)
            noise = draw_noise(cdf, contexts.shape + (m.negatives,), rng)
            noise_weights = ((noise != contexts[..., None]) & (weights[..., None] > 0))
            return {"tokens": tokens, "segment_ids": segments, "context_ids": contexts,
                    "pair_weights": weights, "negative_ids": noise,
                    "negative_weights": noise_weights.astype(np.float32)}

        return fn

    def example_batch(self, batch_size: int, phase) -> dict:
        m, shape = self.cfg.model, (batch_size, phase.seq_len)
        pairs = shape + (2 * m.window,)
        return {"tokens": np.zeros(shape, np.int32), "segment_ids": np.ones(shape, np.int32),
                "context_ids": np.zeros(pairs, np.int32),
                "pair_weights": np.ones(pairs, np.float32),
                "negative_ids": np.zeros(pairs + (m.negatives,), np.int32),
                "negative_weights": np.ones(pairs + (m.negatives,), np.float32)}

    # ---- loss -------------------------------------------------------------
    def loss_sums(self, outputs, batch) -> dict:
        pairs, noise = batch[self.counted], batch["negative_weights"]
        positive = outputs["positive_scores"].astype(jnp.float32)
        negative = outputs["negative_scores"].astype(jnp.float32)
        positive_loss = -jax.nn.log_sigmoid(positive) * pairs
        negative_loss = -jax.nn.log_sigmoid(-negative) * noise
        return {"loss_sum": jnp.sum(positive_loss) + jnp.sum(negative_loss),
                "positive_loss_sum": jnp.sum(positive_loss),
                "pair_sum": jnp.sum(pairs),
                # a prediction ranked right: scored above each of its noise words
                "ranked_sum": jnp.sum(jnp.all((positive[..., None] > negative) | (noise == 0),
                                              axis=-1) * pairs)}

    def normalizers(self, batch) -> dict:
        return {"pairs": jnp.maximum(jnp.sum(batch[self.counted]), 1.0)}

    def loss(self, sums, norms):
        return sums["loss_sum"] / norms["pairs"]

    def metrics(self, sums, norms) -> dict:
        return {"positive_loss": sums["positive_loss_sum"] / norms["pairs"],
                "pair_accuracy": sums["ranked_sum"] / norms["pairs"]}

    def eval_metrics(self, totals) -> dict:
        pairs = max(float(totals["pair_sum"]), 1.0)
        return {"loss": float(totals["loss_sum"]) / pairs,
                "positive_loss": float(totals["positive_loss_sum"]) / pairs,
                "pair_accuracy": float(totals["ranked_sum"]) / pairs}

    def flops_symbols(self, phase) -> dict:
        return {"K": self.cfg.model.negatives, "window": self.cfg.model.window}

    def flops_per_token(self, phase) -> float:
        return word2vec.flops_per_pair(self.cfg.model) * (self.cfg.model.window + 1)

    # ---- statistics (python -m pretrainx.data --stats) ----------------------
    def batch_stats(self, batch) -> dict:
        real = batch["segment_ids"] > 0
        return {"rows": real.shape[0], "all_tokens": real.size, "real_tokens": int(real.sum()),
                "pairs": int(batch["pair_weights"].sum()),
                "negatives": int(batch["negative_weights"].sum())}

    def summarize_stats(self, totals, phase) -> dict:
        real = max(totals["real_tokens"], 1)
        return {"real_token_fraction": totals["real_tokens"] / max(totals["all_tokens"], 1),
                "pairs_per_word": totals["pairs"] / real,
                "negatives_per_pair": totals["negatives"] / max(totals["pairs"], 1),
                "words_per_row": phase.seq_len}

    def show(self, batch, count: int) -> list:
        texts = []
        for row in range(min(count, batch["tokens"].shape[0])):
            real = batch["segment_ids"][row] > 0
            texts.append(f"--- row {row}\n" + self.tokenizer.decode(batch["tokens"][row][real]))
        return texts
