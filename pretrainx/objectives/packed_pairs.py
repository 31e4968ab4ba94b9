"""Packed examples (Krell et al. 2021, "Efficient sequence packing without
cross-contamination"): several examples share a row instead of each padding one of its
own. An example is a sentence pair ([CLS] A [SEP] B [SEP], with its NSP or SOP label) or
a single segment (<s> sentences </s> of one document, RoBERTa's rows kept apart).

Each example keeps its own segment id (attention stays inside it), its own positions
(restarting at 0) and token types, its own masks (drawn exactly as the example would
be masked alone: 15% of its own tokens) and, for a pair, its own label, read at its
own [CLS]. A row's predictions are its examples' end to end: about 15% of the row's
real tokens, so the row keeps max_predictions_per_seq slots plus one per example for
the rounding (Krell et al. likewise size the budget by the pack, not by the example),
and a packed batch's per-example losses are the unpacked batch's
(tests/families/test_bert_packing.py).
Rows are planned and packed first-fit from lengths alone (data/packing.py: pack_pairs),
so the packed dataset stays random-access and resumable; this module masks them.
"""

import jax.numpy as jnp
import numpy as np

from pretrainx.data import packing


def packs(cfg) -> bool:
    """Whether a run packs its examples several to a row (data.pack_examples: a key of
    the objectives that can, off where absent)."""
    return bool(cfg.data.get("pack_examples", False))


def describe(cfg, phase) -> dict:
    """The --describe fields of an objective that may pack its examples."""
    out = {"max_predictions_per_seq": phase.max_predictions}
    if packs(cfg):
        out["max_examples_per_row"] = cfg.data.max_examples_per_row
    return out


def weights_key(label_key: str) -> str:
    """The key of a packed row's per-example label weights (1: a real example)."""
    return label_key.replace("_label", "_weights")


def example_count(batch, label_key: str):
    """A pair objective's denominator over a global batch: the examples its rows hold
    (packed: the label weights' sum), or its rows (one example each)."""
    weights = batch.get(weights_key(label_key))
    if weights is None:
        return jnp.asarray(batch[label_key].shape[0], jnp.float32)
    return jnp.maximum(jnp.sum(weights), 1.0)


def real_examples(batch, label_key: str) -> np.ndarray:
    """For --stats: which label entries are real examples (all of them unpacked)."""
    labels = batch[label_key]
    return batch.get(weights_key(label_key), np.ones(labels.shape, np.float32)) > 0


def label_text(batch, label_key: str, name):
    """row -> the names of its examples' labels (`name(label)`), for --show."""
    labels, real = batch[label_key], real_examples(batch, label_key)
    if labels.ndim == 1:
        return lambda row: name(labels[row])
    return lambda row: " ".join(name(label) for label in labels[row][real[row]])


def masked_row(row: dict, rngs, mask_one, seq_len: int, max_examples: int,
               max_predictions: int, pad_id: int, label_key: str | None = "next_sentence_label",
               offset_keys: tuple = (), copy_keys: tuple = ()) -> dict:
    """One packed row, padded, from `mask_one(example, rng)` (the unpacked transform:
    a padded, masked example) applied to each of its examples with its own rng.

    Per prediction, `offset_keys` are positions in the example (moved by its offset in
    the row) and `copy_keys` values kept as they are (ALBERT's n-gram starts and
    lengths, for --stats)."""
    k = len(row["lengths"])
    ids = np.full(seq_len, pad_id, np.int32)
    types, segments, positions = (np.zeros(seq_len, np.int32) for _ in range(3))
    slots = row_slots(max_examples, max_predictions)
    out = {name: np.zeros(slots, dtype) for name, dtype in (
        ("masked_lm_positions", np.int32), ("masked_lm_ids", np.int32),
        ("masked_lm_weights", np.float32))}
    out.update({name: np.zeros(slots, np.int32) for name in offset_keys + copy_keys})
    cls_positions = np.zeros(max_examples, np.int32)
    labels = np.zeros(max_examples, np.int32)
    label_weights = np.zeros(max_examples, np.float32)
    offset = filled = 0
    for e in range(k):
        n = int(row["lengths"][e])
        example = {key: row[key][offset:offset + n] for key in packing.TOKEN_KEYS if key in row}
        if label_key is not None:
            example[label_key] = row[label_key][e]
        alone = mask_one(example, rngs[e])
        ids[offset:offset + n] = alone["input_ids"][:n]
        types[offset:offset + n] = alone["token_type_ids"][:n]
        segments[offset:offset + n] = e + 1
        positions[offset:offset + n] = np.arange(n)
        real = alone["masked_lm_weights"] > 0
        count = int(real.sum())
        if filled + count > slots:
            raise ValueError(f"a packed row's {filled + count} predictions exceed its {slots} "
                             "slots; validate() keeps max_predictions_per_seq >= mask_prob "
                             "x seq_len so that this cannot happen")
        used = slice(filled, filled + count)
        out["masked_lm_positions"][used] = alone["masked_lm_positions"][real] + offset
        out["masked_lm_ids"][used] = alone["masked_lm_ids"][real]
        out["masked_lm_weights"][used] = 1.0
        for name in offset_keys:
            out[name][used] = alone[name][real] + offset
        for name in copy_keys:
            out[name][used] = alone[name][real]
        filled += count
        if label_key is not None:
            cls_positions[e], labels[e], label_weights[e] = offset, example[label_key], 1
        offset += n
    out.update(input_ids=ids, token_type_ids=types, attention_mask=segments, positions=positions)
    if label_key is not None:
        out.update({"next_sentence_positions": cls_positions, label_key: labels,
                    weights_key(label_key): label_weights})
    return out


def row_slots(max_examples: int, max_predictions: int) -> int:
    """A packed row's prediction slots: the row's budget and one per example (each
    example rounds its own 15%)."""
    return max_predictions + max_examples


def row_rngs(rng, count: int) -> list:
    """Independent generators for a row's examples, seeded from the row's own."""
    return [np.random.default_rng(int(s)) for s in rng.integers(0, 2 ** 63, size=count)]


def example_batch_extras(batch_size: int, seq_len: int, max_examples: int,
                         max_predictions: int, label_key: str | None = "next_sentence_label",
                         prediction_keys: tuple = ()) -> dict:
    """The packed batch's keys beyond an unpacked one's (zeros, for init/compile);
    `prediction_keys`: further int32 arrays of one value per prediction slot."""
    b, slots = batch_size, row_slots(max_examples, max_predictions)
    out = {"positions": np.zeros((b, seq_len), np.int32),
           "masked_lm_positions": np.zeros((b, slots), np.int32),
           "masked_lm_ids": np.zeros((b, slots), np.int32),
           "masked_lm_weights": np.zeros((b, slots), np.float32)}
    out.update({name: np.zeros((b, slots), np.int32) for name in prediction_keys})
    if label_key is not None:
        out.update({"next_sentence_positions": np.zeros((b, max_examples), np.int32),
                    label_key: np.zeros((b, max_examples), np.int32),
                    weights_key(label_key): np.zeros((b, max_examples), np.float32)})
    return out


def packed_transform(mask_one, seq_len: int, max_examples: int, max_predictions: int,
                     pad_id: int, **keys):
    """The packed form of an unpacked transform: (row, rng) -> masked_row, each example
    with an rng of its own drawn from the row's (`keys`: masked_row's label and
    prediction keys)."""
    return lambda row, rng: masked_row(row, row_rngs(rng, len(row["lengths"])), mask_one,
                                       seq_len, max_examples, max_predictions, pad_id, **keys)
