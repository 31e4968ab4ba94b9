"""What the encoder-decoder objectives share (T5's span corruption, BART's denoising):
the packed seq2seq features, the per-target-token loss with T5X's z-loss, and the
--show view of packed examples."""

import jax
import jax.numpy as jnp
import optax

from pretrainx.objectives import accuracy

FEATURES = ("encoder_input_tokens", "encoder_segment_ids", "encoder_positions",
            "decoder_target_tokens", "decoder_input_tokens", "decoder_segment_ids",
            "decoder_positions", "decoder_loss_weights")


def cross_entropy_sums(logits, targets, weights, z_loss: float):
    """Sums over real target tokens of cross-entropy, T5X's z-loss term
    z_loss * log(Z)^2, and correct argmax predictions (float32)."""
    logits = logits.astype(jnp.float32)
    log_z = jax.nn.logsumexp(logits, axis=-1)  # XLA shares it with optax's
    nll = optax.softmax_cross_entropy_with_integer_labels(logits, targets.astype(jnp.int32))
    weights = weights.astype(jnp.float32)
    correct = accuracy.argmax_matches(logits, targets).astype(jnp.float32)
    return {
        "cross_entropy_sum": jnp.sum(nll * weights),
        "z_loss_sum": jnp.sum(z_loss * jnp.square(log_z) * weights),
        "correct_sum": jnp.sum(correct * weights),
        "token_sum": jnp.sum(weights),
    }


def show_segments(batch, count: int, decode, labels: tuple) -> list:
    """The first `count` packed examples of a seq2seq batch, inputs above targets."""
    texts = []
    for row in range(batch["encoder_input_tokens"].shape[0]):
        enc_seg, dec_seg = batch["encoder_segment_ids"][row], batch["decoder_segment_ids"][row]
        for segment in range(1, int(enc_seg.max()) + 1):
            if len(texts) >= count:
                return texts
            inputs = batch["encoder_input_tokens"][row][enc_seg == segment]
            targets = batch["decoder_target_tokens"][row][dec_seg == segment]
            texts.append(f"--- row {row} segment {segment}\n{labels[0]} {decode(inputs)}"
                         f"\n{labels[1]} {decode(targets)}")
    return texts


class PerTargetToken:
    """The loss and metrics per real target token (of loss_sums' cross_entropy_sums)."""

    def normalizers(self, batch) -> dict:
        """Real target tokens of the whole global batch: the loss is per target token
        whatever the mesh or the number of micro-batches."""
        return {"tokens": jnp.maximum(jnp.sum(batch["decoder_loss_weights"]), 1.0)}

    def loss(self, sums, norms):
        return (sums["cross_entropy_sum"] + sums["z_loss_sum"]) / norms["tokens"]

    def metrics(self, sums, norms) -> dict:
        return {"cross_entropy": sums["cross_entropy_sum"] / norms["tokens"],
                "z_loss": sums["z_loss_sum"] / norms["tokens"],
                "accuracy": sums["correct_sum"] / norms["tokens"],
                "target_tokens": sums["token_sum"]}

    def eval_metrics(self, totals) -> dict:
        n = max(float(totals["token_sum"]), 1.0)
        out = {"cross_entropy": float(totals["cross_entropy_sum"]) / n,
               "z_loss": float(totals["z_loss_sum"]) / n,
               "accuracy": float(totals["correct_sum"]) / n}
        out["loss"] = out["cross_entropy"] + out["z_loss"]
        return out
