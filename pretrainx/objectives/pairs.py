"""The parts of a sentence-pair objective (BERT's MLM + NSP, ALBERT's MLM + SOP):
`PairRows`, its data, and `PairLoss`, its loss (assembled.py puts them together).

A pair objective differs from another in how a pass over the documents makes its
pairs and how a padded pair is masked; both are given to PairRows as functions. The
rest is the same: `data.dupe_factor` passes for training, packing several pairs to
a row with data.pack_examples, a padded row with its label, and MLM plus a two-way
cross-entropy on the pair's label, each a mean over the global batch.
"""

import numpy as np

from pretrainx.data import packing
from pretrainx.objectives import encoder, mlm, nsp, packed_pairs

PAIR_KEYS = ("input_ids", "token_type_ids")  # what a pair keeps besides its label


class PairRows:
    """make_pairs(docs, seq_len, short_seq_prob, rng, cls_id, sep_id) -> one pass's
    pairs; mask(padded ids, rng, special ids, max_predictions) -> the masked fields of
    one pair. `prediction_keys`: int32 arrays of one value per prediction the mask also
    writes, `offset_keys` of them positions (moved when pairs are packed into a row)."""

    def __init__(self, cfg, tokenizer, *, make_pairs, mask, label_key: str,
                 prediction_keys: tuple = (), offset_keys: tuple = ()):
        self.cfg, self.tokenizer = cfg, tokenizer
        self.make_pairs, self.mask, self.label_key = make_pairs, mask, label_key
        self.prediction_keys, self.offset_keys = prediction_keys, offset_keys
        self.packed = packed_pairs.packs(cfg)

    def examples_from_documents(self, docs, phase, train: bool, group: int = 0) -> list:
        """`data.dupe_factor` independent pairings for training (one for eval) of pairs
        for `phase.seq_len`; packed several to a row with data.pack_examples."""
        tok, data = self.tokenizer, self.cfg.data
        pairs = mlm.pairings(
            self.cfg, phase, train, group,
            lambda rng: self.make_pairs(docs, phase.seq_len, data.short_seq_prob, rng,
                                        tok.cls_id, tok.sep_id), PAIR_KEYS + (self.label_key,))
        if self.packed:
            return packing.pack_pairs(pairs, phase.seq_len, data.max_examples_per_row,
                                           self.label_key)
        return pairs

    def transform(self, phase, train: bool):
        """(pair, rng) -> the pair padded to phase.seq_len and masked, with its label."""
        tok, label = self.tokenizer, self.label_key
        specials = encoder.unmasked_specials(tok)
        seq_len, max_pred = phase.seq_len, phase.max_predictions

        def fn(example, rng):
            padded, types, attention = mlm.pad_pair(example, seq_len, tok.pad_id)
            return dict(self.mask(padded, rng, specials, max_pred), token_type_ids=types,
                        attention_mask=attention, **{label: np.int32(example[label])})

        if not self.packed:
            return fn
        copied = tuple(k for k in self.prediction_keys if k not in self.offset_keys)
        return packed_pairs.packed_transform(
            fn, seq_len, self.cfg.data.max_examples_per_row, max_pred, tok.pad_id,
            label_key=label, offset_keys=self.offset_keys, copy_keys=copied)

    def example_batch(self, batch_size: int, phase) -> dict:
        """Zeros of the batch's shapes and dtypes (for init and compilation)."""
        batch = encoder.example_batch(batch_size, phase)
        batch[self.label_key] = np.zeros((batch_size,), np.int32)
        for key in self.prediction_keys:
            batch[key] = np.zeros((batch_size, phase.max_predictions), np.int32)
        if self.packed:
            batch.update(packed_pairs.example_batch_extras(
                batch_size, phase.seq_len, self.cfg.data.max_examples_per_row,
                phase.max_predictions, self.label_key, self.prediction_keys))
        return batch

    def describe(self, phase) -> dict:
        return packed_pairs.describe(self.cfg, phase)


class PairLoss:
    """Mean MLM cross-entropy over the real masked positions + mean cross-entropy of
    the pair's two-way label (`label_key`) over its real examples, logged as `task`_*
    (nsp, sop)."""

    def __init__(self, label_key: str, task: str):
        self.label_key, self.task = label_key, task

    def loss_sums(self, outputs, batch) -> dict:
        sums = mlm.mlm_loss_and_metrics(outputs["mlm_logits"], batch["masked_lm_ids"],
                                        batch["masked_lm_weights"])
        pair = nsp.nsp_loss_and_metrics(outputs["nsp_logits"], batch[self.label_key],
                                        batch.get(packed_pairs.weights_key(self.label_key)))
        sums.update({self.task + key[len("nsp"):]: value for key, value in pair.items()})
        return sums

    def normalizers(self, batch) -> dict:
        """Global-batch denominators: real masked positions and examples."""
        return {"mlm": encoder.mlm_normalizer(batch),
                self.task: packed_pairs.example_count(batch, self.label_key)}

    def loss(self, sums, norms):
        return (sums["mlm_loss_sum"] / norms["mlm"]
                + sums[f"{self.task}_loss_sum"] / norms[self.task])

    def metrics(self, sums, norms) -> dict:
        return {**encoder.mlm_metrics(sums, norms), **encoder.pair_metrics(sums, norms, self.task)}

    def eval_metrics(self, totals) -> dict:
        out = {**encoder.mlm_eval_metrics(totals), **encoder.pair_eval_metrics(totals, self.task)}
        out["loss"] = out["mlm_loss"] + out[f"{self.task}_loss"]
        return out
