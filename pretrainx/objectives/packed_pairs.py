"""Packed sentence-pair rows (Krell et al. 2021, "Efficient sequence packing without
cross-contamination"): several [CLS] A [SEP] B [SEP] examples share a row instead of
each padding one of its own.

Each example keeps its own segment id (attention stays inside it), its own positions
(restarting at 0) and token types, its own masks (drawn exactly as the example would
be masked alone: 15% of its own tokens) and its own next-sentence label, read at its
own [CLS]. A row's predictions are its examples' end to end: about 15% of the row's
real tokens, so the row keeps max_predictions_per_seq slots plus one per example for
the rounding (Krell et al. likewise size the budget by the pack, not by the example),
and a packed batch's per-example losses are the unpacked batch's
(tests/test_bert_packing.py).
Rows are planned first-fit from lengths alone (data/packing.py), so the packed
dataset stays random-access and resumable.
"""

import numpy as np

from pretrainx.data import packing

LOOKBACK = 64  # open rows first-fit searches (data/packing.py)


def pack_pairs(pairs: list, seq_len: int, max_examples: int) -> list:
    """Rows of at most `max_examples` pair examples and seq_len tokens, as flat arrays
    (so prepared storage holds them as any example): input_ids and token_type_ids
    end to end, each example's length and next_sentence_label."""
    plan = packing.plan_rows([[p["input_ids"].size, 1] for p in pairs], [seq_len, max_examples],
                             lookback=LOOKBACK)
    return [{"input_ids": np.concatenate([pairs[i]["input_ids"] for i in members]),
             "token_type_ids": np.concatenate([pairs[i]["token_type_ids"] for i in members]),
             "lengths": np.asarray([pairs[i]["input_ids"].size for i in members], np.int32),
             "next_sentence_label": np.asarray([pairs[i]["next_sentence_label"]
                                                for i in members], np.int32)}
            for members in plan]


def masked_row(row: dict, rngs, mask_one, seq_len: int, max_examples: int,
               max_predictions: int, pad_id: int) -> dict:
    """One packed row, padded, from `mask_one(example, rng)` (the unpacked transform:
    a padded, masked example) applied to each of its examples with its own rng."""
    k = len(row["lengths"])
    ids = np.full(seq_len, pad_id, np.int32)
    types, segments, positions = (np.zeros(seq_len, np.int32) for _ in range(3))
    slots = row_slots(max_examples, max_predictions)
    out = {name: np.zeros(slots, dtype) for name, dtype in (
        ("masked_lm_positions", np.int32), ("masked_lm_ids", np.int32),
        ("masked_lm_weights", np.float32))}
    cls_positions = np.zeros(max_examples, np.int32)
    labels = np.zeros(max_examples, np.int32)
    label_weights = np.zeros(max_examples, np.float32)
    offset = filled = 0
    for e in range(k):
        n = int(row["lengths"][e])
        example = {"input_ids": row["input_ids"][offset:offset + n],
                   "token_type_ids": row["token_type_ids"][offset:offset + n],
                   "next_sentence_label": row["next_sentence_label"][e]}
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
        filled += count
        cls_positions[e], labels[e], label_weights[e] = offset, example["next_sentence_label"], 1
        offset += n
    return dict(out, input_ids=ids, token_type_ids=types, attention_mask=segments,
                positions=positions, next_sentence_positions=cls_positions,
                next_sentence_label=labels, next_sentence_weights=label_weights)


def row_slots(max_examples: int, max_predictions: int) -> int:
    """A packed row's prediction slots: the row's budget and one per example (each
    example rounds its own 15%)."""
    return max_predictions + max_examples


def row_rngs(rng, count: int) -> list:
    """Independent generators for a row's examples, seeded from the row's own."""
    return [np.random.default_rng(int(s)) for s in rng.integers(0, 2 ** 63, size=count)]


def example_batch_extras(batch_size: int, seq_len: int, max_examples: int,
                         max_predictions: int) -> dict:
    """The packed batch's keys beyond an unpacked one's (zeros, for init/compile)."""
    b, slots = batch_size, row_slots(max_examples, max_predictions)
    return {"positions": np.zeros((b, seq_len), np.int32),
            "next_sentence_positions": np.zeros((b, max_examples), np.int32),
            "next_sentence_label": np.zeros((b, max_examples), np.int32),
            "next_sentence_weights": np.zeros((b, max_examples), np.float32),
            "masked_lm_positions": np.zeros((b, slots), np.int32),
            "masked_lm_ids": np.zeros((b, slots), np.int32),
            "masked_lm_weights": np.zeros((b, slots), np.float32)}
