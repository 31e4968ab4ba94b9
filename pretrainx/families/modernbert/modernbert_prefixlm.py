"""PrefixLM for Ettin's decoder (`modernbert_prefixlm`): the decoder's rows
(modernbert_clm.py), each packed example split at a point drawn uniformly in [1, n - 1]
afresh every epoch (objectives/prefix_lm.py's split, UL2's S denoiser); the prefix
attends to itself both ways, the rest sees the prefix and itself causally, and the loss
is on the tokens after the prefix. The window of the local layers holds as in the
decoder: a prefix token sees its own side of the window only.
"""

import jax.numpy as jnp
import numpy as np

from pretrainx.families.modernbert import modernbert_clm
from pretrainx.objectives import next_token, prefix_lm


class ModernBertPrefixLm(modernbert_clm.ModernBertClm):
    title = "the ModernBERT decoder as a prefix LM"

    def describe(self, phase) -> dict:
        return dict(super().describe(phase), prefix="uniform in [1, n - 1] an example")

    def transform(self, phase, train: bool):
        rows = super().transform(phase, train)

        def fn(example, rng):
            out = rows(example, rng)
            prefix, after = prefix_lm.split(out["attention_mask"], out["positions"], rng)
            # the last position predicts nothing in its row (next_token's targets)
            return dict(out, prefix=prefix,
                        loss_weights=np.append(after[:-1], False).astype(np.float32))

        return fn

    def example_batch(self, batch_size: int, phase) -> dict:
        out = super().example_batch(batch_size, phase)
        shape = (batch_size, phase.seq_len)
        return dict(out, prefix=np.zeros(shape, np.int32),
                    loss_weights=np.ones(shape, np.float32))

    def _weights(self, batch):
        targets, same = next_token.targets_and_weights(batch["input_ids"],
                                                       batch["attention_mask"])
        return targets, same * batch["loss_weights"][:, :-1]

    def loss_sums(self, outputs, batch) -> dict:
        targets, w = self._weights(batch)
        return next_token.token_sums(outputs["logits"][:, :-1], targets, w)

    def normalizers(self, batch) -> dict:
        return {"tokens": jnp.maximum(jnp.sum(self._weights(batch)[1]), 1.0)}

    # ---- python -m pretrainx.data --stats -----------------------------------
    def batch_stats(self, batch) -> dict:
        stats = super().batch_stats(batch)
        _, w = self._weights(batch)
        w, prefix = np.asarray(w) > 0, batch["prefix"] > 0
        # a target inside the prefix would be seen by the prefix's own attention: 0
        return dict(stats, targets=int(w.sum()), prefix_tokens=int(prefix.sum()),
                    targets_in_prefix=int((w & prefix[:, 1:]).sum()))

    def summarize_stats(self, totals, phase) -> dict:
        """prefix_fraction: the prefixes' share of the real tokens (1/2 on average)."""
        return dict(super().summarize_stats(totals, phase),
                    prefix_fraction=totals["prefix_tokens"] / max(totals["real_tokens"], 1),
                    targets_in_prefix=totals["targets_in_prefix"])
