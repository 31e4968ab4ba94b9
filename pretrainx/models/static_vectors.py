"""Static word vectors as the input layer of a fine-tuned model: how word2vec's and GloVe's
vectors were used downstream before contextual encoders, so that they enter a comparison
of pretraining strategies on the same tasks.

The vectors are the family's tables (`tables`, summed: GloVe's W + W~ as glove.c writes
them); above them a network trained from scratch on the task:

classify (one sentence or a pair): the mean of each segment's real vectors, u (type 0)
and v (type 1, zero for one sentence), read as [u, v, |u - v|, u * v] (Conneau et al.
2017's pair features; a deep averaging network, Iyyer et al. 2015, for one sentence),
then dense + ReLU, dropout, the classifier.
tokens (NER): each token's vector beside its neighbours' in a window of 5 (Collobert et
al. 2011's window approach), dense + ReLU, dropout, the classifier.
The dense layer is named `pooler`, so fine-tuning creates it fresh (a pretraining run
has none) and finetune/layerwise.py counts it with the head.

The fine-tuning key optimizer.freeze_embeddings keeps the vectors as pretrained (the
tables are depth 0 for finetune/layerwise.py); by default they are tuned.
"""

import jax.numpy as jnp
from flax import linen as nn

from pretrainx.models import heads, layers

WINDOW = 2  # neighbours on each side of a token (a window of 5)
DROPOUT = 0.1  # before the classifier, as BERT's heads


def _segment_mean(x, attention_mask, token_type_ids, segment: int):
    real = ((attention_mask > 0) & (token_type_ids == segment))[..., None].astype(x.dtype)
    return (x * real).sum(axis=1) / jnp.maximum(real.sum(axis=1), 1)


def _windows(x, attention_mask):
    """[batch, length, (2 WINDOW + 1) E]: each token's vector and its neighbours' (zeros
    past the row's ends and on padding)."""
    x = x * (attention_mask > 0)[..., None].astype(x.dtype)
    padded = jnp.pad(x, ((0, 0), (WINDOW, WINDOW), (0, 0)))
    length = x.shape[1]
    return jnp.concatenate([padded[:, i:i + length] for i in range(2 * WINDOW + 1)], axis=-1)


class StaticVectorsForFineTuning(heads.TaskModel):
    """The family's vector tables (`tables`: their parameter names, summed) under the task
    network of the module docstring."""
    tables: tuple = ("vectors",)

    @nn.compact
    def __call__(self, batch, deterministic: bool = True):
        cfg = self.cfg
        ids, mask = batch["input_ids"], batch["attention_mask"]
        x = sum(layers.Embed(cfg.vocab_size, cfg.embedding_size, name=name)(ids)
                for name in self.tables)
        if self.head == "classify":
            types = batch.get("token_type_ids", jnp.zeros_like(ids))
            u, v = (_segment_mean(x, mask, types, s) for s in (0, 1))
            h = jnp.concatenate([u, v, jnp.abs(u - v), u * v], axis=-1)
        elif self.head == "tokens":
            h = _windows(x, mask)
        else:
            raise ValueError(f"static vectors fine-tune the classify and tokens heads, "
                             f"not {self.head!r}")
        h = nn.relu(layers.Dense(cfg.embedding_size, (None, "mlp"), name="pooler")(h))
        h = layers.Dropout(DROPOUT)(h, deterministic=deterministic)
        logits = layers.Dense(heads.features(self.head, self.num_labels), ("mlp", "classes"),
                              name=heads.HEAD_MODULES[0])(h)
        return {"logits": logits.astype(jnp.float32)}


def finetune_model(tables: tuple):
    """A registry.Family.finetune_model over the vector tables named `tables`."""
    def build(cfg, head: str, num_labels: int, peft):
        del peft  # registry.Family(peft=False): nothing but full fine-tuning
        return StaticVectorsForFineTuning(cfg, head, num_labels, tuple(tables))
    return build
