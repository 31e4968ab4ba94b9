"""The crammed BERT (Geiping and Goldstein 2022, "Cramming: training a language model on
a single GPU in one day"), as their crammed-bert architecture config builds it.

What differs from BERT: pre-LN (LayerNorm, eps 1e-12) with a LayerNorm after the
embeddings and a final one; no bias in the attention projections or the feed-forward
(use_bias: False); a gated GeLU feed-forward (their intermediate 3,072 is the GLU's
input projection, halved to 1,536 by the gate: model.mlp_dim = 1536); scaled sinusoidal
positions (the fixed sinusoid times one learned scalar, initialised at 1/sqrt(hidden));
no token types, no pooler, no NSP; the MLM decoder tied to the embeddings with no bias
and no transform before it (skip_head_transform), applied only at the masked positions
(sparse prediction). 16 layers of 768. For fine-tuning, their classification head: the
mean of the real tokens, dense to 1,024, tanh, dropout, linear.
"""

import math

import jax.numpy as jnp
import ml_collections
from flax import linen as nn

from pretrainx.models import heads, layers, mha
from pretrainx.models.gated import GatedMlp


def default_config(dropout_rate: float = 0.1,
                   attention_dropout_rate: float = 0.1) -> ml_collections.ConfigDict:
    """crammed-bert.yaml's model keys; dropout is fine-tuning's (0.1), the recipe
    pretrains without it (crammed_mlm passes 0)."""
    m = ml_collections.ConfigDict()
    m.family = "crammed"
    m.num_layers = 16
    m.hidden_size = 768
    m.num_heads = 12
    m.mlp_dim = 1536  # the GLU's halves of their intermediate 3,072
    m.vocab_size = 32768  # their WordPiece vocabulary
    m.max_position_embeddings = 128
    m.layer_norm_eps = 1e-12
    m.initializer_range = 0.02
    m.hidden_act = "gelu"
    m.dropout_rate = dropout_rate
    m.attention_dropout_rate = attention_dropout_rate
    m.classifier_width = 1024
    m.update(layers.compute_keys())
    return m


def sinusoid(length: int, width: int):
    """Vaswani et al.'s table: sin at even dimensions, cos at odd, base 10,000."""
    position = jnp.arange(length, dtype=jnp.float32)[:, None]
    rate = jnp.exp(jnp.arange(0, width, 2, dtype=jnp.float32) * (-math.log(10000.0) / width))
    table = jnp.zeros((length, width), jnp.float32)
    table = table.at[:, 0::2].set(jnp.sin(position * rate))
    return table.at[:, 1::2].set(jnp.cos(position * rate))


class CrammedLayer(nn.Module):
    cfg: ml_collections.ConfigDict
    dtype: jnp.dtype

    @nn.compact
    def __call__(self, x, mask, deterministic):
        cfg = self.cfg
        init = layers.truncated_normal(cfg.initializer_range)
        h = layers.LayerNorm(cfg.layer_norm_eps, self.dtype, name="attention_norm")(x)
        h = mha.MultiHeadAttention(
            num_heads=cfg.num_heads, head_dim=cfg.hidden_size // cfg.num_heads,
            dropout_rate=cfg.attention_dropout_rate, use_bias=False, dtype=self.dtype,
            kernel_init=init, float32_logits=cfg.float32_attention_logits,
            impl=cfg.attention_impl, name="attention")(h, h, mask, deterministic)
        x = x + layers.Dropout(cfg.dropout_rate)(h, deterministic=deterministic)
        x = layers.constrain(x, ("batch", "length", "embed"))
        h = layers.LayerNorm(cfg.layer_norm_eps, self.dtype, name="mlp_norm")(x)
        h = GatedMlp(cfg.mlp_dim, cfg.hidden_act, 0.0, self.dtype, init, init, name="mlp")(
            h, deterministic)
        x = x + layers.Dropout(cfg.dropout_rate)(h, deterministic=deterministic)
        return layers.constrain(x, ("batch", "length", "embed"))


class CrammedEncoder(nn.Module):
    """Token embeddings plus sinusoidal positions times one learned scale (no token
    types), LayerNorm and dropout -> pre-norm layers -> a final LayerNorm."""
    cfg: ml_collections.ConfigDict

    def setup(self):
        cfg = self.cfg
        self.dtype = jnp.dtype(cfg.dtype)
        init = layers.truncated_normal(cfg.initializer_range)
        self.token_embed = layers.Embed(cfg.vocab_size, cfg.hidden_size, ("vocab", "embed"),
                                        self.dtype, init)
        self.position_scale = self.param(
            "position_scale", nn.with_logical_partitioning(
                nn.initializers.constant(cfg.hidden_size ** -0.5), (None,)), (1,), jnp.float32)
        self.embed_norm = layers.LayerNorm(cfg.layer_norm_eps, self.dtype)
        self.embed_dropout = layers.Dropout(cfg.dropout_rate)
        self.layers = layers.layer_stack(CrammedLayer, cfg, self.dtype, cfg.num_layers, "layer",
                                         static_argnums=(3,))
        self.final_norm = layers.LayerNorm(cfg.layer_norm_eps, self.dtype)

    def __call__(self, input_ids, segments, positions, deterministic):
        length = input_ids.shape[1]
        table = sinusoid(max(self.cfg.max_position_embeddings, length), self.cfg.hidden_size)
        if positions is None:
            where = table[:length][None]
        else:
            where = jnp.take(table, positions, axis=0)
        x = self.token_embed(input_ids) + (self.position_scale * where).astype(self.dtype)
        x = self.embed_dropout(self.embed_norm(x), deterministic=deterministic)
        x = layers.constrain(x, ("batch", "length", "embed"))
        x = layers.apply_stack(self.layers, x, layers.Mask(segments, segments), deterministic)
        return self.final_norm(x)


class CrammedForMaskedLM(nn.Module):
    """The encoder and the tied decoder (no bias, no transform) at the masked positions."""
    cfg: ml_collections.ConfigDict

    def setup(self):
        self.bert = CrammedEncoder(self.cfg)

    def __call__(self, batch, deterministic: bool = True):
        x = self.bert(*layers.packed_inputs(batch), deterministic)
        picked = jnp.take_along_axis(x, batch["masked_lm_positions"][..., None], axis=1)
        picked = layers.constrain(picked, ("batch", "pred", "embed"))
        logits = self.bert.token_embed.attend(picked)
        return {"mlm_logits": layers.constrain(logits, ("batch", "pred", "vocab"))
                .astype(jnp.float32)}


class CrammedForFineTuning(heads.TaskModel):
    """classify: mean of the real tokens -> dense (classifier_width) -> tanh -> dropout ->
    linear; tokens / span: dropout -> linear at every token."""

    @nn.compact
    def __call__(self, batch, deterministic: bool = True):
        cfg = self.cfg
        x = CrammedEncoder(cfg, name="bert")(*layers.packed_inputs(batch), deterministic)
        return heads.task_logits(
            x, batch["attention_mask"], head=self.head, num_labels=self.num_labels,
            deterministic=deterministic, dtype=jnp.dtype(cfg.dtype),
            init=layers.truncated_normal(cfg.initializer_range), dropout_rate=cfg.dropout_rate,
            pooling="mean", pooler_width=cfg.classifier_width, dropout_on_span=True)


def finetune_model(cfg, head: str, num_labels: int, peft) -> CrammedForFineTuning:
    return CrammedForFineTuning(cfg, head, num_labels)


def flops_per_token(cfg, seq_len: int, max_predictions: int) -> float:
    """Forward x 3: per layer 4 h x h projections, the GLU's 3 h x mlp and attention
    (4 seq h); the decoder (h x vocab) at `max_predictions` positions a row."""
    h = cfg.hidden_size
    per_layer = 2 * (4 * h * h + 3 * h * cfg.mlp_dim) + 2 * 2 * seq_len * h
    return 3.0 * (cfg.num_layers * per_layer + max_predictions * 2 * h * cfg.vocab_size / seq_len)
