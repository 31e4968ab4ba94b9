"""The ModernBERT decoder's objective (Ettin, Weller et al. 2025): next-token prediction
on the encoder's own rows.

Ettin trains its decoders on the data, shapes, schedule and phases of its encoders; only
the attention (causal) and the loss differ. So the rows here are ModernBertMlm's, built
by the same code in the same order (packed [CLS] text [SEP] examples with segment ids
and positions that restart), without masks: a config that trains the encoder trains
its decoder on the same tokens when `objective` is changed (configs/ettin.py). Each
position predicts the next token of its own example (objectives/next_token.py).
"""

import numpy as np

from pretrainx.families.modernbert import model as modernbert
from pretrainx.families.modernbert import modernbert_mlm
from pretrainx.families.modernbert.modernbert_mlm import ModernBertMlm
from pretrainx.objectives import next_token


class ModernBertClm(ModernBertMlm):
    title = "the ModernBERT decoder"
    network = modernbert.ModernBertForCausalLM
    loss_part = next_token.NextTokenLoss
    flops_formula = ModernBertMlm.flops_formula.replace("P*", "seq*")

    def describe(self, phase) -> dict:
        return {"pack_examples": bool(self.cfg.data.pack_examples)}

    def flops_per_token(self, phase) -> float:  # the head at every position
        return self.flops(self.cfg.model, phase.seq_len, phase.seq_len)

    def transform(self, phase, train: bool):
        """(row, rng) -> the row padded, with its segment ids and positions."""
        pad, seq_len = self.tokenizer.pad_id, phase.seq_len

        def fn(example, rng):
            del rng  # nothing is drawn: the encoder's masks are its own
            return modernbert_mlm.padded_row(example, seq_len, pad)

        return fn

    def example_batch(self, batch_size: int, phase) -> dict:
        shape = (batch_size, phase.seq_len)
        return {"input_ids": np.zeros(shape, np.int32),
                "attention_mask": np.ones(shape, np.int32),
                "positions": np.zeros(shape, np.int32)}

    # ---- python -m pretrainx.data --stats / --show ---------------------------
    def batch_stats(self, batch) -> dict:
        segments = batch["attention_mask"]
        _, w = next_token.targets_and_weights(batch["input_ids"], segments)
        return {"rows": segments.shape[0], "all_tokens": segments.size,
                "real_tokens": int((segments > 0).sum()), "targets": int(np.sum(w)),
                "examples": int(segments.max(axis=1).sum())}

    def summarize_stats(self, totals, phase) -> dict:
        real = max(totals["real_tokens"], 1)
        return {"padding_fraction": 1 - totals["real_tokens"] / max(totals["all_tokens"], 1),
                "target_fraction": totals["targets"] / real,
                "examples_per_row": totals["examples"] / max(totals["rows"], 1)}

    def show(self, batch, count: int) -> list:
        texts = []
        for row in range(min(count, batch["input_ids"].shape[0])):
            segments = batch["attention_mask"][row]
            ids = batch["input_ids"][row][segments > 0]
            texts.append(f"--- row {row} ({int(segments.max())} examples)\n"
                         + " ".join(self.tokenizer.id_to_piece(int(i)) for i in ids))
        return texts
