"""MNTP (LLM2Vec; objectives/mntp.py) for Ettin's decoder: the decoder's rows (the
encoder's packed [CLS] text [SEP] examples), 20% of the tokens that follow a token of
their own example chosen (80% the [MASK] piece, 10% a random token, 10% kept), each
predicted from the output one position before it, with the attention bidirectional.
The parameters are the decoder's, so `init_from` an Ettin decoder converts it; the
result reads as the encoder (HF's ModernBertForMaskedLM), its states mean-pooled."""

import numpy as np

from pretrainx.families.modernbert.modernbert_clm import ModernBertClm
from pretrainx.objectives import mntp


class ModernBertMntp(ModernBertClm):
    title = "the ModernBERT decoder (MNTP)"
    loss_part = mntp.MaskedNextTokenLoss

    def describe(self, phase) -> dict:
        return dict(super().describe(phase), mask_prob=self.cfg.data.mask_prob)

    def transform(self, phase, train: bool):
        """(row, rng) -> the decoder's row, masked; next_ids are its unmasked next tokens."""
        rows = super().transform(phase, train)
        tok = self.tokenizer
        specials = np.asarray(tok.special_ids())
        ordinary = np.setdiff1d(np.arange(tok.vocab_size), specials)
        rate = self.cfg.data.mask_prob

        def fn(example, rng):
            row = rows(example, rng)
            ids, segments = row["input_ids"], row["attention_mask"]
            follows = np.zeros(ids.size, bool)
            follows[1:] = (segments[1:] == segments[:-1]) & (segments[1:] > 0)
            inputs, weights = mntp.mask_following(ids, follows, specials, ordinary, rate,
                                                  tok.mask_id, rng)
            next_ids = np.zeros(ids.size, np.int32)
            next_ids[:-1] = ids[1:]
            return dict(row, input_ids=inputs, next_ids=next_ids, loss_weights=weights)

        return fn

    def example_batch(self, batch_size: int, phase) -> dict:
        batch = super().example_batch(batch_size, phase)
        batch["next_ids"] = np.zeros((batch_size, phase.seq_len), np.int32)
        batch["loss_weights"] = np.ones((batch_size, phase.seq_len), np.float32)
        return batch

    def batch_stats(self, batch) -> dict:
        stats = super().batch_stats(batch)
        return dict(stats, targets=int(batch["loss_weights"].sum()),
                    masked_inputs=int((batch["input_ids"] == self.tokenizer.mask_id).sum()))

    def summarize_stats(self, totals, phase) -> dict:
        """target_fraction is the masking rate (the targets are the chosen tokens)."""
        return dict(super().summarize_stats(totals, phase),
                    mask_token_fraction=totals["masked_inputs"] / max(totals["targets"], 1))
