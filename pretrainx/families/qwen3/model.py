"""Qwen3 (Qwen Team 2025) as transformers' Qwen3ForCausalLM defines it: a decoder of
pre-RMSNorm blocks whose attention is grouped-query (16 query heads share 8 key/value
heads in the 0.6B), its queries and keys RMS-normed per head before rotary positions
(QK-norm), a SwiGLU feed-forward, no biases, and the output layer tied to the word
table in the small sizes. Packed rows carry `segment_ids`: causal attention stays inside
a document and positions restart at each document, as GPT-2's rows do here.
`causal=False` makes the attention bidirectional (LLM2Vec's first step).
"""

import jax.numpy as jnp
import ml_collections
from flax import linen as nn

from pretrainx.models import heads, layers, mha
from pretrainx.models.gated import GatedMlp

# The released sizes' model keys (their config.json on the Hub)
SIZES = {
    "0.6b": dict(num_layers=28, hidden_size=1024, num_heads=16, num_kv_heads=8,
                 head_dim=128, mlp_dim=3072, tie_output=True),
}


def default_config(size: str = "0.6b", causal: bool = True) -> ml_collections.ConfigDict:
    """Qwen3-0.6B's model keys (Qwen/Qwen3-0.6B's config.json): 151,936 tokens, RoPE
    base 1e6, RMSNorm eps 1e-6, 40,960 positions, no dropout; `causal=False`: made
    bidirectional."""
    m = ml_collections.ConfigDict()
    m.family = "qwen3"
    m.update(SIZES[size])
    m.vocab_size = 151_936
    m.max_position_embeddings = 40_960  # no table: the longest row RoPE was trained for
    m.rope_theta = 1_000_000.0
    m.rms_norm_eps = 1e-6
    m.initializer_range = 0.02
    m.hidden_act = "silu"
    m.dropout_rate = 0.0
    m.attention_dropout_rate = 0.0
    m.causal = causal  # False: bidirectional attention (an encoder made from the decoder)
    m.update(layers.compute_keys())
    return m


class Qwen3Block(nn.Module):
    cfg: ml_collections.ConfigDict
    dtype: jnp.dtype
    decode: bool = False

    @nn.compact
    def __call__(self, x, mask, positions, deterministic):
        cfg = self.cfg
        init = nn.initializers.normal(cfg.initializer_range)
        y = layers.RMSNorm(cfg.rms_norm_eps, self.dtype, name="attention_norm")(x)
        y = mha.MultiHeadAttention(
            num_heads=cfg.num_heads, head_dim=cfg.head_dim, kv_heads=cfg.num_kv_heads,
            qk_norm_eps=cfg.rms_norm_eps, use_bias=False,
            dropout_rate=cfg.attention_dropout_rate, dtype=self.dtype, kernel_init=init,
            float32_logits=cfg.float32_attention_logits, impl=cfg.attention_impl,
            rotary=mha.Rotary(cfg.rope_theta),
            decoding=mha.Decoding() if self.decode else None,
            name="attention")(y, y, mask, deterministic, positions)
        x = layers.constrain(x + layers.Dropout(cfg.dropout_rate)(
            y, deterministic=deterministic), ("batch", "length", "embed"))
        y = layers.RMSNorm(cfg.rms_norm_eps, self.dtype, name="mlp_norm")(x)
        y = GatedMlp(cfg.mlp_dim, cfg.hidden_act, 0.0, self.dtype, init, init,
                     name="mlp")(y, deterministic)
        return layers.constrain(x + layers.Dropout(cfg.dropout_rate)(
            y, deterministic=deterministic), ("batch", "length", "embed"))


class Qwen3(nn.Module):
    """(batch: inputs, segment_ids, positions) -> next-token logits [batch, length, vocab].

    With `decode=True` a call takes one token per row (inputs [batch, 1] and its
    position) and reads/extends the key-value cache; initialise the cache by a call
    with the full length.
    """
    cfg: ml_collections.ConfigDict
    decode: bool = False

    def setup(self):
        cfg = self.cfg
        self.dtype = jnp.dtype(cfg.dtype)
        init = nn.initializers.normal(cfg.initializer_range)
        self.token_embed = layers.Embed(cfg.vocab_size, cfg.hidden_size, ("vocab", "embed"),
                                        self.dtype, init)
        self.layers = layers.layer_stack(Qwen3Block, cfg, self.dtype, cfg.num_layers, "layer",
                                         static_argnums=(4,), decode=self.decode)
        self.final_norm = layers.RMSNorm(cfg.rms_norm_eps, self.dtype)
        self.output = layers.output_layer(cfg, self.dtype, init)

    def hidden(self, batch, deterministic: bool = True):
        """The final RMSNorm's states [batch, length, embed]."""
        segments = batch["segment_ids"]
        x = layers.constrain(self.token_embed(batch["inputs"]), ("batch", "length", "embed"))
        mask = layers.Mask(segments, segments, causal=bool(self.cfg.causal),
                           kv_prefix=layers.prefix_of(batch))
        x = layers.apply_stack(self.layers, x, mask, batch["positions"], deterministic)
        return self.final_norm(x)

    def logits(self, h):
        logits = layers.vocab_logits(self.token_embed, self.output, h)
        return layers.constrain(logits, ("batch", "length", "vocab")).astype(jnp.float32)

    def __call__(self, batch, deterministic: bool = True):
        return {"logits": self.logits(self.hidden(batch, deterministic))}


# contrastive fine-tuning's model: the decoder's last states pooled (models/heads.py)
finetune_model = heads.decoder_finetune_model(heads.embedder(Qwen3), "qwen3")


def outputs(cfg, params, batch) -> dict:
    """The final RMSNorm's states and the next-token logits of a right-padded batch
    (input_ids, attention_mask), for pretrainx.load."""
    return heads.decoder_outputs(Qwen3(cfg), params, batch)


def flops_per_token(cfg, seq_len: int) -> float:
    """Training FLOPs per token (forward x 3): per layer the query and output
    projections (h x H each, H = heads x head_dim), the grouped key and value ones
    (h x KV each), the SwiGLU's three h x mlp, scores and weighted sum over seq_len keys
    (causal, counted in full as MaxText does), and the h x vocab output."""
    h, n = cfg.hidden_size, cfg.num_layers
    big_h, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    per_layer = 2 * (2 * h * big_h + 2 * h * kv + 3 * h * cfg.mlp_dim) + 4 * seq_len * big_h
    return 3.0 * (n * per_layer + 2 * h * cfg.vocab_size)
