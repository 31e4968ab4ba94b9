"""Masked diffusion (MDLM, objectives/mdlm.py) with ModernBERT's encoder: the MLM
objective's packed document rows, each masked at its own rate t (MDLM's low-discrepancy
draw over the global batch) with every chosen token the mask, the MLM head at the masked
positions, the cross entropy weighted by 1/t. The parameters are the MLM model's, so a
phase switches between MLM and MDLM, and `python -m pretrainx.generate
--diffusion_steps=T` writes with the trained model. With `data.response_only` the rows
are instruction pairs, their responses masked (mdlm.instruction_examples)."""

import numpy as np

from pretrainx.families.modernbert import modernbert_mlm
from pretrainx.families.modernbert.modernbert_mlm import ModernBertMlm
from pretrainx.objectives import mdlm


class ModernBertMdlm(ModernBertMlm):
    title = "ModernBERT (MDLM)"
    loss_part = mdlm.MdlmLoss

    def describe(self, phase) -> dict:
        return {"max_predictions_per_seq": phase.max_predictions, "mask_rate": "t ~ U(0, 1) "
                "a row, low-discrepancy over the batch", "pack_examples":
                bool(self.cfg.data.pack_examples)}

    def examples(self, files, phase, train: bool) -> list:
        if not self.cfg.data.response_only:
            return super().examples(files, phase, train)
        return mdlm.instruction_examples(files, self.cfg.data, self.tokenizer, phase.seq_len)

    def transform(self, phase, train: bool):
        """(row, rng, index) -> the row padded, masked at its batch position's rate."""
        tok = self.tokenizer
        specials = np.asarray(tok.special_ids())
        seed = self.cfg.seed * 1000 + phase.index + (0 if train else 500)

        def fn(example, rng, index):
            row = modernbert_mlm.padded_row(example, phase.seq_len, tok.pad_id)
            maskable = mdlm.maskable_tokens(row["input_ids"], row["attention_mask"], specials,
                                            example.get("response_start"))
            t = mdlm.rate(seed, index, phase.global_batch_size)
            masked = mdlm.mask_row(row["input_ids"], maskable, t, rng, tok.mask_id,
                                   phase.max_predictions)
            return dict(row, **masked, token_type_ids=np.zeros(phase.seq_len, np.int32))

        fn.indexed = True
        return fn

    def example_batch(self, batch_size: int, phase) -> dict:
        return dict(super().example_batch(batch_size, phase), **mdlm.rate_features(batch_size))

    def batch_stats(self, batch) -> dict:
        stats = super().batch_stats(batch)
        return dict(stats, rate_sum=float(batch["mask_rate"].sum()))

    def summarize_stats(self, totals, phase) -> dict:
        return dict(super().summarize_stats(totals, phase),
                    mean_mask_rate=totals["rate_sum"] / max(totals["rows"], 1))
