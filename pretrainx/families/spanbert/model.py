"""SpanBERT's pretraining model (Joshi et al. 2020): BERT's encoder and MLM head, plus
the span boundary objective's head.

For a masked token x_i of a span (s, e) the SBO head sees only the encoder outputs
at the span's two boundary tokens x_{s-1} and x_{e+1} and a learned embedding of
the position i - s inside the span: y_i = LN(GeLU(W2 LN(GeLU(W1 [x_{s-1}; x_{e+1};
p_{i-s}])))), hidden size as the model's, and predicts x_i through the same tied
decoder (embedding^T + bias) as the MLM head.
"""

import jax.numpy as jnp

from pretrainx.models import layers
from pretrainx.families.bert import model as bert
from pretrainx.models import transformer_encoder as enc


def default_config():
    """SpanBERT-base's model keys: BERT-Base over bert-base-cased's vocabulary, exact
    GeLU, and the SBO head's relative positions (longer spans are clipped)."""
    return bert.default_config(family="spanbert",
                               vocab_size=28996,  # bert-base-cased
                               hidden_act="gelu", sbo_max_span_tokens=32)


class SpanBertForPreTraining(enc.EncoderForMaskedLM):
    """mlm_logits and sbo_logits at the gathered masked positions."""

    def setup(self):
        super().setup()
        cfg = self.cfg
        init = layers.truncated_normal(cfg.initializer_range)
        self.sbo_position = layers.Embed(cfg.sbo_max_span_tokens, cfg.hidden_size,
                                         ("position", "embed"), self.dtype, init)
        self.sbo_dense_1 = layers.Dense(cfg.hidden_size, ("embed", "mlp"), dtype=self.dtype,
                                        kernel_init=init)
        self.sbo_norm_1 = layers.LayerNorm(cfg.layer_norm_eps, self.dtype)
        self.sbo_dense_2 = layers.Dense(cfg.hidden_size, ("embed", "mlp"), dtype=self.dtype,
                                        kernel_init=init)
        self.sbo_norm_2 = layers.LayerNorm(cfg.layer_norm_eps, self.dtype)

    def sbo_logits(self, x, left, right, offset):
        axes = ("batch", "pred", "embed")
        gather = lambda at: layers.constrain(jnp.take_along_axis(x, at[..., None], axis=1), axes)
        offset = jnp.minimum(offset, self.cfg.sbo_max_span_tokens - 1)
        h = jnp.concatenate([gather(left), gather(right), self.sbo_position(offset)], axis=-1)
        act = layers.activation(self.cfg.hidden_act)
        h = layers.constrain(self.sbo_norm_1(act(self.sbo_dense_1(h))), axes)
        h = layers.constrain(self.sbo_norm_2(act(self.sbo_dense_2(h))), axes)
        return self.decode(h)

    def __call__(self, batch, deterministic: bool = True):
        x = self.encode(batch, deterministic)
        return {"mlm_logits": self.mlm_logits(x, batch["masked_lm_positions"]),
                "sbo_logits": self.sbo_logits(x, batch["sbo_left"], batch["sbo_right"],
                                              batch["sbo_offset"])}


def flops_per_token(cfg, seq_len: int, max_predictions: int) -> float:
    """BERT's encoder and MLM head (transformer_encoder.flops_per_token without pooler and NSP) plus
    the SBO head: 3h x h and h x h, then the h x V decoder, per prediction."""
    h, n = cfg.hidden_size, cfg.num_layers
    per_layer = 2 * (4 * h * h + 2 * h * cfg.mlp_dim) + 2 * 2 * seq_len * h
    head = max_predictions * 2 * ((h * h + h * cfg.vocab_size) + (4 * h * h + h * cfg.vocab_size))
    return 3.0 * (n * per_layer + head / seq_len)
