"""Replaced token detection's loss and metrics (ELECTRA, DeBERTa-v3): the generator's
MLM loss plus `disc_weight` x the discriminator's mean per-token binary cross-entropy,
from a model's mlm_logits, disc_logits and disc_labels."""

import jax.numpy as jnp
import optax

from pretrainx.objectives import encoder, mlm


def loss_sums(outputs, batch) -> dict:
    sums = mlm.mlm_loss_and_metrics(outputs["mlm_logits"], batch["masked_lm_ids"],
                                    batch["masked_lm_weights"])
    real = (batch["attention_mask"] > 0).astype(jnp.float32)
    logits, labels = outputs["disc_logits"], outputs["disc_labels"]
    bce = optax.sigmoid_binary_cross_entropy(logits, labels)
    predicted = (logits > 0).astype(jnp.float32)
    sums.update(
        disc_loss_sum=jnp.sum(bce * real),
        disc_correct_sum=jnp.sum((predicted == labels).astype(jnp.float32) * real),
        disc_token_sum=jnp.sum(real),
        replaced_sum=jnp.sum(labels * real),
        predicted_sum=jnp.sum(predicted * real),
        true_positive_sum=jnp.sum(predicted * labels * real))
    return sums


def normalizers(batch) -> dict:
    return {"mlm": encoder.mlm_normalizer(batch),
            "disc": jnp.maximum(jnp.sum((batch["attention_mask"] > 0).astype(jnp.float32)),
                                1.0)}


def loss(sums, norms, gen_weight: float, disc_weight: float):
    """gen_weight x mean MLM cross-entropy + disc_weight x mean token BCE."""
    return (gen_weight * sums["mlm_loss_sum"] / norms["mlm"]
            + disc_weight * sums["disc_loss_sum"] / norms["disc"])


def _rates(sums, div) -> dict:
    return {"disc_accuracy": sums["disc_correct_sum"] / div(sums["disc_token_sum"]),
            "replaced_fraction": sums["replaced_sum"] / div(sums["disc_token_sum"]),
            "disc_precision": sums["true_positive_sum"] / div(sums["predicted_sum"]),
            "disc_recall": sums["true_positive_sum"] / div(sums["replaced_sum"])}


def metrics(sums, norms) -> dict:
    return {**encoder.mlm_metrics(sums, norms),
            "disc_loss": sums["disc_loss_sum"] / norms["disc"],
            **_rates(sums, lambda x: jnp.maximum(x, 1.0))}


def eval_metrics(totals, gen_weight: float, disc_weight: float) -> dict:
    t = {k: float(v) for k, v in totals.items()}
    n = max(t["mlm_weight_sum"], 1.0)
    out = {"mlm_loss": t["mlm_loss_sum"] / n, "mlm_accuracy": t["mlm_correct_sum"] / n,
           "disc_loss": t["disc_loss_sum"] / max(t["disc_token_sum"], 1.0),
           **_rates(t, lambda x: max(x, 1.0))}
    out["loss"] = gen_weight * out["mlm_loss"] + disc_weight * out["disc_loss"]
    return out


class RtdLoss:
    """The loss part of a replaced-token-detection objective (ELECTRA, DeBERTa-v3;
    assembled.py), weighing the generator's MLM and the discriminator's terms."""

    def __init__(self, gen_weight: float, disc_weight: float):
        self.gen_weight, self.disc_weight = gen_weight, disc_weight

    def loss_sums(self, outputs, batch) -> dict:
        return loss_sums(outputs, batch)

    def normalizers(self, batch) -> dict:
        return normalizers(batch)

    def loss(self, sums, norms):
        """gen_weight x mean MLM cross-entropy + disc_weight x mean token BCE."""
        return loss(sums, norms, self.gen_weight, self.disc_weight)

    def metrics(self, sums, norms) -> dict:
        return metrics(sums, norms)

    def eval_metrics(self, totals) -> dict:
        return eval_metrics(totals, self.gen_weight, self.disc_weight)
