"""Next-token prediction over an encoder's rows: the loss part (assembled.py) of a
decoder trained on exactly the rows its paired encoder reads (Ettin: the same packed
[CLS] text [SEP] examples, in the same order, without masks).

Position t of a row predicts token t + 1 when both belong to the same example
(segment ids, 0 = padding): a packed example never predicts the next one's first token.
"""

import jax.numpy as jnp
import numpy as np
import optax

from pretrainx.objectives import accuracy


def targets_and_weights(input_ids, segments):
    """([batch, length - 1] next tokens, their 0/1 float32 weights)."""
    same = (segments[:, 1:] == segments[:, :-1]) & (segments[:, :-1] > 0)
    return input_ids[:, 1:], same.astype(jnp.float32)


def token_sums(logits, targets, weights) -> dict:
    """The batch's summed cross-entropy, correct predictions and weight of next-token
    targets (any causal LM's: GPT-2's rows too)."""
    nll = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
    correct = accuracy.argmax_matches(logits, targets).astype(jnp.float32)
    return {"loss_sum": jnp.sum(nll * weights), "correct_sum": jnp.sum(correct * weights),
            "token_sum": jnp.sum(weights)}


def eval_metrics(totals) -> dict:
    """Loss, accuracy and perplexity of `token_sums` added over an evaluation."""
    n = max(float(totals["token_sum"]), 1.0)
    loss = float(totals["loss_sum"]) / n
    return {"loss": loss, "accuracy": float(totals["correct_sum"]) / n,
            "perplexity": float(np.exp(min(loss, 50.0)))}


class NextTokenLoss:
    """Mean cross-entropy of the global batch's next tokens; accuracy beside it, and
    perplexity in evaluation."""

    def loss_sums(self, outputs, batch) -> dict:
        targets, w = targets_and_weights(batch["input_ids"], batch["attention_mask"])
        return token_sums(outputs["logits"][:, :-1], targets, w)

    def normalizers(self, batch) -> dict:
        _, w = targets_and_weights(batch["input_ids"], batch["attention_mask"])
        return {"tokens": jnp.maximum(jnp.sum(w), 1.0)}

    def loss(self, sums, norms):
        return sums["loss_sum"] / norms["tokens"]

    def metrics(self, sums, norms) -> dict:
        return {"accuracy": sums["correct_sum"] / norms["tokens"]}

    def eval_metrics(self, totals) -> dict:
        return eval_metrics(totals)
