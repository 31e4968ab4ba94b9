"""The task heads every encoder fine-tunes under, written once.

embed_mean / embed_cls: the encoder's last states pooled, nothing on top (contrastive
fine-tuning, finetune/contrastive.py). classify: the sequence pooled ([CLS] or the mean
of its real tokens), optionally
through a pooler (dense + activation, BERT's tanh pooler, DeBERTa's ContextPooler,
the crammed BERT's head), dropout, num_labels logits (1 for regression); tokens:
dropout, num_labels logits per token (NER); span: start and end logits per token
(extractive QA). The layers are created in the calling module's scope under the
names `pooler` and `classifier`, so fine-tuned checkpoints and HF exports keep their
paths whichever family calls.
"""

import jax.numpy as jnp
import ml_collections
from flax import linen as nn

from pretrainx.errors import UserError
from pretrainx.models import layers

HEAD_MODULES = ("classifier",)  # what a task adds (trained under every PEFT method)


class TaskModel(nn.Module):
    """The fields of every encoder's fine-tuning model: its model keys, the task head
    (classify, tokens or span) and the number of labels."""
    cfg: ml_collections.ConfigDict
    head: str
    num_labels: int


def features(head: str, num_labels: int) -> int:
    return 2 if head == "span" else num_labels


def pool(x, attention_mask, how: str):
    """[batch, embed] from [batch, length, embed]: `cls` (the first token), `mean` (of
    the real tokens) or `last` (the last real token of a right-padded row: what a
    decoder's classifier reads, the one token that has seen the whole row)."""
    if how == "mean":
        return layers.mean_over_tokens(x, attention_mask)
    if how == "last":
        last = jnp.maximum(jnp.sum(attention_mask > 0, axis=1) - 1, 0)
        return jnp.take_along_axis(x, last[:, None, None], axis=1)[:, 0]
    return x[:, 0]


def task_logits(x, attention_mask, *, head: str, num_labels: int, deterministic: bool,
                dtype, init, dropout_rate: float, pooling: str = "cls", pooler_width: int = 0,
                pooler_activation: str = "tanh", dropout_before_pooler: bool = False,
                dropout_on_span: bool = False) -> dict:
    """{"logits": float32} of the task `head` over encoder outputs `x`. pooling "none":
    `x` is already what the classifier reads (a family pooled it its own way)."""
    def drop(h):
        return layers.Dropout(dropout_rate)(h, deterministic=deterministic)

    if head.startswith("embed_"):  # a sentence embedding: the pooled states, no layer
        return {"logits": pool(x, attention_mask, head[len("embed_"):]).astype(jnp.float32)}

    axes = ("embed", "classes")
    if head == "classify" and pooling != "none":
        x = pool(x, attention_mask, pooling)
        if pooler_width:
            if dropout_before_pooler:
                x = drop(x)
            x = layers.activation(pooler_activation)(layers.Dense(
                pooler_width, ("embed", "mlp"), dtype=dtype, kernel_init=init,
                name="pooler")(x))
            x = layers.constrain(x, ("batch", "embed"))
            axes = ("mlp", "classes")
    if head != "span" or dropout_on_span:
        x = drop(x)
    logits = layers.Dense(features(head, num_labels), axes, dtype=dtype, kernel_init=init,
                          name=HEAD_MODULES[0])(x)
    return {"logits": logits.astype(jnp.float32)}


def decoder_outputs(network: nn.Module, params, batch) -> dict:
    """{"hidden_states", "logits"}: a decoder's last states and next-token logits at every
    position of a right-padded batch (input_ids, attention_mask), for pretrainx.load;
    `network` reads rows of inputs, segment_ids and positions through `hidden(rows)`
    and `logits(states)` (GPT-2's, Qwen3's)."""
    ids = batch["input_ids"]
    rows = {"inputs": ids, "segment_ids": batch["attention_mask"],
            "positions": jnp.broadcast_to(jnp.arange(ids.shape[1]), ids.shape)}

    def run(net, rows):
        h = net.hidden(rows)
        return {"hidden_states": h, "logits": net.logits(h)}
    return network.apply({"params": params}, rows, method=run)


def embedder(network_cls):
    """`network_cls` (a decoder: rows of inputs, segment_ids, positions through
    `hidden`) as a fine-tuning model of the embed_* heads (contrastive fine-tuning):
    a padded batch (input_ids, attention_mask) in, its last states pooled out. A
    subclass, so its parameters keep the pretraining run's paths."""
    class Embedder(network_cls):
        head: str = "embed_mean"

        def __call__(self, batch, deterministic: bool = True):
            ids, mask = batch["input_ids"], batch["attention_mask"]
            rows = {"inputs": ids, "segment_ids": mask,
                    "positions": jnp.broadcast_to(jnp.arange(ids.shape[1]), ids.shape)}
            x = self.hidden(rows, deterministic)
            return task_logits(x, mask, head=self.head, num_labels=0,
                               deterministic=deterministic, dtype=x.dtype, init=None,
                               dropout_rate=0.0)

    Embedder.__name__ = Embedder.__qualname__ = network_cls.__name__ + "Embedder"
    return Embedder


def decoder_finetune_model(embedder_cls, family: str):
    """A decoder family's `finetune_model`: the embed_* heads only."""
    def build(cfg, head: str, num_labels: int, peft):
        if not head.startswith("embed_"):
            raise UserError(f"a {family} model fine-tunes as a sentence embedder (task "
                            f"contrastive); the {head} head is built for encoders")
        return embedder_cls(cfg, head=head)
    return build


def mlm_outputs(network: nn.Module, params, batch) -> dict:
    """{"hidden_states", "logits"}: the encoder's last states and the MLM head's logits at
    every position of a padded batch, for pretrainx.load; `network` is an MLM model with
    `encode(batch, deterministic)` and `mlm_logits(states, positions)`."""
    def run(net, batch):
        x = net.encode(batch, True)
        return {"hidden_states": x, "logits": net.mlm_logits(x, layers.every_position(x))}
    return network.apply({"params": params}, batch, method=run)
