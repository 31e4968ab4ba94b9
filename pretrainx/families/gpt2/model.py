"""GPT-2 as OpenAI released it (Radford et al. 2019): a decoder-only transformer.

Pre-LN blocks (LayerNorm before attention and MLP, one more after the stack),
learned positions, GELU (tanh form), an output layer tied to the token
embeddings, and the paper's residual init: projections into the residual stream
drawn with std 0.02 / sqrt(2 * layers). Packed rows carry `segment_ids`: causal
attention stays inside a document and positions restart at each document.
"""

import math

import jax.numpy as jnp
import ml_collections
from flax import linen as nn

from pretrainx.models import heads, layers, mha


def default_config(causal: bool = True) -> ml_collections.ConfigDict:
    """GPT-2 small's model keys (Radford et al. 2019): context 1024, 50,257 tokens;
    `causal=False`: made bidirectional."""
    m = ml_collections.ConfigDict()
    m.family = "gpt2"
    m.num_layers = 12
    m.hidden_size = 768
    m.num_heads = 12
    m.mlp_dim = 3072
    m.vocab_size = 50257
    m.max_position_embeddings = 1024
    m.dropout_rate = 0.1  # embeddings, residual branches
    m.attention_dropout_rate = 0.1
    m.layer_norm_eps = 1e-5
    m.initializer_range = 0.02
    m.hidden_act = "gelu_tanh"
    m.causal = causal  # False: bidirectional attention (an encoder made from the decoder)
    m.update(layers.compute_keys())
    m.tie_output = True  # False: lm_head has a kernel of its own (tie_word_embeddings=False)
    return m


def _normal(std):
    return nn.initializers.normal(std)


class Gpt2Block(nn.Module):
    cfg: ml_collections.ConfigDict
    dtype: jnp.dtype
    decode: bool = False

    @nn.compact
    def __call__(self, x, bias, deterministic):
        cfg = self.cfg
        init = _normal(cfg.initializer_range)
        residual_init = _normal(cfg.initializer_range / math.sqrt(2 * cfg.num_layers))
        drop = lambda y: layers.Dropout(cfg.dropout_rate)(y, deterministic=deterministic)  # noqa
        y = layers.LayerNorm(cfg.layer_norm_eps, self.dtype, name="attention_norm")(x)
        y = mha.MultiHeadAttention(
            num_heads=cfg.num_heads, head_dim=cfg.hidden_size // cfg.num_heads,
            dropout_rate=cfg.attention_dropout_rate, dtype=self.dtype, kernel_init=init,
            out_init=residual_init, float32_logits=cfg.float32_attention_logits,
            decoding=mha.Decoding() if self.decode else None, impl=cfg.attention_impl,
            name="attention")(y, y, bias, deterministic)
        x = layers.constrain(x + drop(y), ("batch", "length", "embed"))
        y = layers.LayerNorm(cfg.layer_norm_eps, self.dtype, name="mlp_norm")(x)
        y = layers.Mlp(cfg.mlp_dim, cfg.hidden_act, self.dtype, init, out_init=residual_init,
                       name="mlp")(y, deterministic)
        x = layers.constrain(x + drop(y), ("batch", "length", "embed"))
        return x


class GPT2(nn.Module):
    """(batch: inputs, segment_ids, positions) -> next-token logits [batch, length, vocab].

    With `decode=True` a call takes one token per row (inputs [batch, 1] and its
    position) and reads/extends the key-value cache; initialise the cache by a
    call with the full length.
    """
    cfg: ml_collections.ConfigDict
    decode: bool = False

    def setup(self):
        cfg = self.cfg
        self.dtype = jnp.dtype(cfg.dtype)
        self.token_embed = layers.Embed(cfg.vocab_size, cfg.hidden_size, ("vocab", "embed"),
                                        self.dtype, _normal(cfg.initializer_range))
        self.position_embed = layers.Embed(cfg.max_position_embeddings, cfg.hidden_size,
                                           ("position", "embed"), self.dtype, _normal(0.01))
        self.embed_dropout = layers.Dropout(cfg.dropout_rate)
        self.layers = layers.layer_stack(Gpt2Block, cfg, self.dtype, cfg.num_layers, "layer",
                                         static_argnums=(3,), decode=self.decode)
        self.final_norm = layers.LayerNorm(cfg.layer_norm_eps, self.dtype)
        self.output = layers.output_layer(cfg, self.dtype, _normal(cfg.initializer_range))

    def hidden(self, batch, deterministic: bool = True):
        """The final LayerNorm's states [batch, length, embed]."""
        tokens, segments = batch["inputs"], batch["segment_ids"]
        x = self.token_embed(tokens) + self.position_embed(batch["positions"])
        x = self.embed_dropout(x, deterministic=deterministic)
        x = layers.constrain(x, ("batch", "length", "embed"))
        mask = layers.Mask(segments, segments, causal=bool(self.cfg.causal),
                           kv_prefix=layers.prefix_of(batch))
        x = layers.apply_stack(self.layers, x, mask, deterministic)
        return self.final_norm(x)

    def logits(self, h):
        logits = layers.vocab_logits(self.token_embed, self.output, h)
        return layers.constrain(logits, ("batch", "length", "vocab")).astype(jnp.float32)

    def __call__(self, batch, deterministic: bool = True):
        return {"logits": self.logits(self.hidden(batch, deterministic))}


# contrastive fine-tuning's model: the decoder's last states pooled (models/heads.py)
finetune_model = heads.decoder_finetune_model(heads.embedder(GPT2), "gpt2")


def outputs(cfg, params, batch) -> dict:
    """The final LayerNorm's states and the next-token logits of a right-padded batch
    (input_ids, attention_mask), for pretrainx.load."""
    return heads.decoder_outputs(GPT2(cfg), params, batch)


def flops_per_token(cfg, seq_len: int) -> float:
    """Training FLOPs per token (forward x 3): per layer 4 h x h projections and two
    h x mlp, scores and weighted sum over seq_len / 2 keys on average (causal,
    counted in full as MaxText does), and the tied h x vocab output."""
    h, mlp, n = cfg.hidden_size, cfg.mlp_dim, cfg.num_layers
    per_layer = 2 * (4 * h * h + 2 * h * mlp) + 2 * 2 * seq_len * h
    return 3.0 * (n * per_layer + 2 * h * cfg.vocab_size)
