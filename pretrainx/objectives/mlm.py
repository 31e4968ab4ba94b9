"""Masked language modelling: dynamic masking (numpy) and the loss (jax).

``mask_tokens`` follows ``create_masked_lm_predictions`` of google-research/bert
``create_pretraining_data.py`` with three deliberate differences:

* the 15% budget is taken of the candidate (non-special) tokens, not of all
  tokens including [CLS]/[SEP], so the masking rate is exactly ``mask_prob``;
* a random replacement is drawn from the non-special vocabulary only (the
  original draws from the whole vocab, so it could insert [CLS], [PAD], ...);
* with whole-word masking a word never spans a special token: a word starts
  at a word-start candidate or after a non-candidate position (the original
  glues a leading "##" piece of segment B onto the last word of A).
"""

import jax.numpy as jnp
import numpy as np
import optax

from pretrainx.errors import UserError
from pretrainx.objectives import accuracy

MASK_FRACTION = 0.8
KEEP_FRACTION = 0.1  # the remaining 0.1 becomes a random token


def num_to_predict(num_candidates, max_predictions, mask_prob, rng=None):
    """How many tokens to mask: n * p rounded, at least 1, at most the cap.

    With `rng` the rounding is stochastic (floor, plus one with probability of the
    fraction), so the expected rate is exactly p at any length: google-research's
    round() gives 4 of 29 tokens (13.8%) at length 32, where the paper says 15%.
    """
    if num_candidates == 0:
        return 0
    expected = num_candidates * mask_prob
    if rng is None:
        count = int(round(expected))
    else:
        count = int(np.floor(expected)) + int(rng.random() < expected - np.floor(expected))
    return min(max_predictions, max(1, count))


def word_ids(candidates, word_starts):
    """Word index of each candidate position (candidates sorted ascending)."""
    starts = word_starts[candidates].astype(bool)
    if candidates.size:
        starts[0] = True
        starts[1:] |= np.diff(candidates) != 1
    return np.cumsum(starts) - 1


def word_spans(input_ids, special_ids, word_starts):
    """The words of a padded sequence as [first, end) token positions (special tokens
    are not words) and whether word w runs straight into word w + 1 (no special token
    between): the units that span and n-gram masking grow over.
    Returns (candidate positions, first, end, joined)."""
    input_ids = np.asarray(input_ids)
    special_ids = np.asarray(special_ids, np.int64)
    is_special = (input_ids[:, None] == special_ids[None, :]).any(axis=1)
    candidates = np.flatnonzero(~is_special)
    word_of = word_ids(candidates, np.asarray(word_starts))
    n_words = int(word_of[-1]) + 1 if candidates.size else 0
    first = candidates[np.searchsorted(word_of, np.arange(n_words))]
    last = candidates[np.append(np.searchsorted(word_of, np.arange(1, n_words)) - 1,
                                candidates.size - 1)] if n_words else first
    end = last + 1
    joined = np.append(first[1:] == end[:-1], False)
    return candidates, first, end, joined


def choose_whole_words(word_of, budget, rng):
    """Indices into candidates: whole words in random order while they fit.

    Same greedy rule as the original: skip a word that would overshoot the
    budget, stop once the budget is met. Vectorised as a prefix that fits plus
    a short loop over words that still fit the remaining slack.
    """
    lengths = np.bincount(word_of)
    order = rng.permutation(lengths.size)
    ordered = lengths[order]
    fits = np.cumsum(ordered) <= budget
    n_prefix = int(np.argmin(fits)) if not fits.all() else fits.size
    taken = list(order[:n_prefix])
    slack = budget - int(ordered[:n_prefix].sum())
    rest_words, rest_lengths = order[n_prefix:], ordered[n_prefix:]
    while slack > 0 and rest_words.size:
        ok = rest_lengths <= slack
        if not ok.any():
            break
        j = int(np.argmax(ok))
        taken.append(rest_words[j])
        slack -= int(rest_lengths[j])
        rest_words, rest_lengths = rest_words[j + 1:], rest_lengths[j + 1:]
    selected = np.zeros(lengths.size, bool)
    selected[np.asarray(taken, dtype=np.int64)] = True
    return np.flatnonzero(selected[word_of])


def random_non_special(count, vocab_size, special_ids, rng):
    """Uniform ids from [0, vocab_size) minus special_ids, without a vocab table."""
    if count == 0:
        return np.zeros((0,), np.int32)
    specials = np.unique(special_ids[(special_ids >= 0) & (special_ids < vocab_size)])
    k = rng.integers(0, vocab_size - specials.size, size=count)
    # The k-th allowed id is k plus the number of specials at or below it.
    return (k + np.searchsorted(specials - np.arange(specials.size), k, side="right")
            ).astype(np.int32)


def mask_tokens(input_ids, rng, *, vocab_size, mask_id, special_ids, max_predictions,
                mask_prob, word_starts=None, mask_fraction=MASK_FRACTION,
                keep_fraction=KEEP_FRACTION):
    """Dynamic BERT masking of one padded sequence.

    Chosen positions become [MASK] 80%, a random non-special id 10%, and stay
    unchanged 10% (one uniform draw per position; ELECTRA passes mask_fraction
    0.85 and keep_fraction 0.15: no random ids). Returns the masked
    ``input_ids`` and ``masked_lm_positions``/``masked_lm_ids`` (int32,
    sorted, zero-padded to ``max_predictions``) with ``masked_lm_weights``.
    """
    input_ids = np.asarray(input_ids)
    if input_ids.ndim != 1:
        raise UserError(f"mask_tokens expects one 1-D sequence, got shape {input_ids.shape}")
    if not 0.0 <= mask_prob <= 1.0:
        raise UserError(f"mask_prob={mask_prob} must be in [0, 1]")
    special_ids = np.asarray(special_ids, dtype=np.int64)
    # A handful of special ids: a broadcast compare beats np.isin's setup cost.
    is_special = (input_ids[:, None] == special_ids[None, :]).any(axis=1)
    candidates = np.flatnonzero(~is_special)
    budget = num_to_predict(candidates.size, max_predictions, mask_prob, rng)
    if word_starts is None:
        chosen = rng.permutation(candidates.size)[:budget]
    else:
        chosen = choose_whole_words(word_ids(candidates, np.asarray(word_starts)), budget, rng)
    positions = np.sort(candidates[chosen])
    n = positions.size

    u = rng.random(n)
    to_mask = u < mask_fraction
    to_random = u >= mask_fraction + keep_fraction
    masked = input_ids.astype(np.int32, copy=True)
    masked[positions[to_mask]] = mask_id
    masked[positions[to_random]] = random_non_special(
        int(to_random.sum()), vocab_size, special_ids, rng)

    out_positions = np.zeros(max_predictions, np.int32)
    out_ids = np.zeros(max_predictions, np.int32)
    weights = np.zeros(max_predictions, np.float32)
    out_positions[:n] = positions
    out_ids[:n] = input_ids[positions]
    weights[:n] = 1.0
    return {
        "input_ids": masked,
        "masked_lm_positions": out_positions,
        "masked_lm_ids": out_ids,
        "masked_lm_weights": weights,
    }


def pairings(cfg, phase, train: bool, group: int, create_pairs, keys) -> list:
    """`dupe_factor` independent pairings of the documents for training (one for eval),
    each from its own seeded rng, as create_pretraining_data.py's dupe_factor;
    `create_pairs(rng)` makes one pass's pairs, of which `keys` are kept."""
    out = []
    passes = cfg.data.dupe_factor if train else 1
    for dupe in range(passes):
        key = [cfg.seed, phase.seq_len, dupe, int(train)] + ([group] if group else [])
        pairs = create_pairs(np.random.default_rng(key))
        out.extend({k: p[k] for k in keys} for p in pairs)
        if dupe == 0 and passes > 1:
            check_pairs_fit(out, passes)
    return out


# What a kept pair costs beside its arrays' bytes: the dict and the arrays' headers
# (CPython 3.11, numpy 2: 184 + 112 per array; rounded up)
_PAIR_OVERHEAD, _ARRAY_OVERHEAD = 240, 120


def check_pairs_fit(first_pass: list, passes: int, available: int | None = None) -> None:
    """Refuse `passes` pairings that would not fit in memory, measured on the first
    (all passes are the same corpus): data.dupe_factor multiplies what a run holds,
    and a large one ran the host out of memory without a word."""
    per_pass = sum(_PAIR_OVERHEAD + sum(v.nbytes + _ARRAY_OVERHEAD for v in p.values()
                                        if isinstance(v, np.ndarray)) for p in first_pass)
    available = available_memory() if available is None else available
    if available and per_pass * passes > 0.8 * available:
        raise UserError(f"data.dupe_factor={passes} would hold {per_pass * passes / 2**30:.1f} "
                        f"GiB of pairs in memory ({per_pass / 2**20:.0f} MiB a pass) and this "
                        f"host has {available / 2**30:.1f} GiB available; lower it, or write "
                        "them to disk a group of documents at a time with python -m pretrainx.data "
                        "prepare")


def available_memory() -> int:
    """Bytes the kernel says a process may still take (MemAvailable); 0 if unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def pad_pair(example, seq_len: int, pad_id: int):
    """A pair example's input_ids / token_type_ids padded to seq_len, and its attention mask."""
    ids = example["input_ids"]
    n = ids.size
    padded = np.full(seq_len, pad_id, np.int32)
    padded[:n] = ids
    types = np.zeros(seq_len, np.int32)
    types[:n] = example["token_type_ids"]
    attention = np.zeros(seq_len, np.int32)
    attention[:n] = 1
    return padded, types, attention


def unmasked_ids(batch):
    """A masked batch's input_ids as they were before masking."""
    ids, positions = batch["input_ids"], batch["masked_lm_positions"]
    at = np.take_along_axis(ids, positions, axis=1)
    original = ids.copy()
    np.put_along_axis(original, positions,
                      np.where(batch["masked_lm_weights"] > 0, batch["masked_lm_ids"], at), 1)
    return original


def masking_counts(batch, mask_id: int, special_ids) -> dict:
    """--stats counts of BERT-style masking: real tokens, candidates (real, non-special
    tokens before masking), masked, and how many became [MASK] / random / stayed."""
    ids, positions = batch["input_ids"], batch["masked_lm_positions"]
    chosen = batch["masked_lm_weights"] > 0
    at = np.take_along_axis(ids, positions, axis=1)
    is_mask = chosen & (at == mask_id)
    kept = chosen & (at == batch["masked_lm_ids"])
    real = batch["attention_mask"] > 0
    candidates = real & ~np.isin(unmasked_ids(batch), special_ids)
    return {"real_tokens": int(real.sum()), "all_tokens": ids.size, "rows": ids.shape[0],
            "candidates": int(candidates.sum()), "masked": int(chosen.sum()),
            "mask_token": int(is_mask.sum()), "kept": int(kept.sum()),
            "random": int((chosen & ~is_mask & ~kept).sum())}


def mlm_loss_and_metrics(logits, masked_lm_ids, masked_lm_weights):
    """Sums (not means) of MLM cross-entropy, accuracy and weight, in float32.

    logits: [batch, max_pred, vocab] in any float dtype. Sums let callers
    normalise once over a global batch or across micro-batches.
    """
    ids = masked_lm_ids.astype(jnp.int32)
    weights = masked_lm_weights.astype(jnp.float32)
    # log Z - logit[id], never the whole log-softmax: on v3 that array's writes and
    # reads were 0.5% of BERT-Base's step.
    nll = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), ids)
    correct = accuracy.argmax_matches(logits, ids).astype(jnp.float32)
    return {
        "mlm_loss_sum": jnp.sum(nll * weights),
        "mlm_correct_sum": jnp.sum(correct * weights),
        "mlm_weight_sum": jnp.sum(weights),
    }
