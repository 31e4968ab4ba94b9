"""Gemma 3's text decoder (Gemma Team 2025) as transformers' Gemma3ForCausalLM defines it.

What differs from Qwen3: every block norms both before and after each sublayer
(pre- and post-norms around attention and the feed-forward), the RMSNorms multiply by
(1 + scale) with the scale starting at zero, the word vectors are scaled by
sqrt(hidden_size) on the way in, the feed-forward is GeGLU (tanh GeLU), queries are
scaled by query_pre_attn_scalar ** -0.5, and attention alternates: five layers of
sliding-window attention (512 keys, RoPE base 10,000) then one global layer (RoPE base
1e6), the pattern `sliding_window_pattern` repeats from the first layer. Grouped-query
attention (one key/value head in the 270M and 1B) with QK-norm, as Qwen3's.

`causal=False` turns the attention bidirectional, as Gemma Encoder (2025) and HF's
use_bidirectional_attention do: global layers see the whole document, sliding ones
sliding_window // 2 keys on either side. Packed rows carry `segment_ids`, and positions
restart at each document.
"""

import jax.numpy as jnp
import ml_collections
from flax import linen as nn

from pretrainx.models import heads, layers, mha
from pretrainx.models.gated import GatedMlp

# The released sizes' model keys (google/gemma-3-270m's and gemma-3-1b-pt's config.json)
SIZES = {
    "270m": dict(num_layers=18, hidden_size=640, num_heads=4, num_kv_heads=1, head_dim=256,
                 mlp_dim=2048),
    "1b": dict(num_layers=26, hidden_size=1152, num_heads=4, num_kv_heads=1, head_dim=256,
               mlp_dim=6912),
}


def default_config(size: str = "270m", causal: bool = True) -> ml_collections.ConfigDict:
    """Gemma 3's model keys as released: 262,144 tokens, RoPE bases 1e6 (global) and
    1e4 (sliding), a 512-key window in five layers of every six, 32,768 positions;
    `causal=False`: made bidirectional."""
    m = ml_collections.ConfigDict()
    m.family = "gemma3"
    m.update(SIZES[size])
    m.vocab_size = 262_144
    m.max_position_embeddings = 32_768  # no table: the longest row RoPE was trained for
    m.query_pre_attn_scalar = 256
    m.rope_theta = 1_000_000.0  # global layers
    m.local_rope_theta = 10_000.0  # sliding-window layers (HF: rope_local_base_freq)
    m.sliding_window = 512  # keys a causal sliding layer sees, the query's own included
    m.sliding_window_pattern = 6  # layer i is global when (i + 1) % pattern == 0
    m.rms_norm_eps = 1e-6
    m.initializer_range = 0.02
    m.hidden_act = "gelu_tanh"
    m.dropout_rate = 0.0
    m.attention_dropout_rate = 0.0
    m.tie_output = True
    m.causal = causal  # False: bidirectional attention (an encoder made from the decoder)
    m.update(layers.compute_keys())
    return m


def is_global(cfg, index: int) -> bool:
    return (index + 1) % cfg.sliding_window_pattern == 0


def window(cfg, index: int) -> int:
    """Layer `index`'s attention.Mask window: 0 (global), else how far a key may be
    (HF's causal window counts the query itself; its bidirectional one is half of it
    on either side)."""
    if is_global(cfg, index):
        return 0
    return cfg.sliding_window - 1 if cfg.causal else cfg.sliding_window // 2


class Gemma3Block(nn.Module):
    cfg: ml_collections.ConfigDict
    dtype: jnp.dtype
    index: int
    decode: bool = False

    @nn.compact
    def __call__(self, x, rows: layers.Mask, positions, deterministic):
        """`rows`: the row's attention (segments, causal, a PrefixLM's prefix); the
        layer sets its own window."""
        cfg = self.cfg
        init = nn.initializers.normal(cfg.initializer_range)
        norm = lambda name: layers.RMSNorm(cfg.rms_norm_eps, self.dtype, plus_one=True,  # noqa: E731
                                           name=name)
        glob, reach = is_global(cfg, self.index), window(cfg, self.index)
        mask = rows.replace(window=reach)
        h = norm("attention_norm")(x)
        y = mha.MultiHeadAttention(
            num_heads=cfg.num_heads, head_dim=cfg.head_dim, kv_heads=cfg.num_kv_heads,
            qk_norm_eps=cfg.rms_norm_eps, qk_norm_plus_one=True,
            query_scale=cfg.query_pre_attn_scalar ** -0.5, use_bias=False,
            dropout_rate=cfg.attention_dropout_rate, dtype=self.dtype, kernel_init=init,
            float32_logits=cfg.float32_attention_logits, impl=cfg.attention_impl,
            rotary=mha.Rotary(cfg.rope_theta if glob else cfg.local_rope_theta),
            decoding=mha.Decoding(window=reach) if self.decode else None,
            name="attention")(h, h, mask, deterministic, positions)
        drop = lambda t: layers.Dropout(cfg.dropout_rate)(t, deterministic=deterministic)  # noqa: E731
        x = layers.constrain(x + drop(norm("post_attention_norm")(y)),
                             ("batch", "length", "embed"))
        y = GatedMlp(cfg.mlp_dim, cfg.hidden_act, 0.0, self.dtype, init, init,
                     name="mlp")(norm("mlp_norm")(x), deterministic)
        return layers.constrain(x + drop(norm("post_mlp_norm")(y)), ("batch", "length", "embed"))


class Gemma3(nn.Module):
    """(batch: inputs, segment_ids, positions) -> next-token logits [batch, length, vocab].

    With `decode=True` a call takes one token per row and reads/extends the key-value
    cache (sliding layers look back at most sliding_window - 1 keys); initialise the
    cache by a call with the full length.
    """
    cfg: ml_collections.ConfigDict
    decode: bool = False

    def setup(self):
        cfg = self.cfg
        self.dtype = jnp.dtype(cfg.dtype)
        init = nn.initializers.normal(cfg.initializer_range)
        self.token_embed = layers.Embed(cfg.vocab_size, cfg.hidden_size, ("vocab", "embed"),
                                        self.dtype, init)
        remat = (nn.remat(Gemma3Block, policy=layers.REMAT_POLICIES[cfg.remat],
                          static_argnums=(4,)) if cfg.remat != "none" else Gemma3Block)
        self.layers = [remat(cfg, self.dtype, i, self.decode, name=f"layer_{i}")
                       for i in range(cfg.num_layers)]
        self.final_norm = layers.RMSNorm(cfg.rms_norm_eps, self.dtype, plus_one=True)
        self.output = layers.output_layer(cfg, self.dtype, init)

    def hidden(self, batch, deterministic: bool = True):
        """The final RMSNorm's states [batch, length, embed]."""
        segments = batch["segment_ids"]
        scale = jnp.asarray(self.cfg.hidden_size ** 0.5, self.dtype)  # rounded as HF's
        x = layers.constrain(self.token_embed(batch["inputs"]) * scale,
                             ("batch", "length", "embed"))
        rows = layers.Mask(segments, segments, causal=bool(self.cfg.causal),
                           kv_prefix=layers.prefix_of(batch))
        for layer in self.layers:
            x = layer(x, rows, batch["positions"], deterministic)
        return self.final_norm(x)

    def logits(self, h):
        logits = layers.vocab_logits(self.token_embed, self.output, h)
        return layers.constrain(logits, ("batch", "length", "vocab")).astype(jnp.float32)

    def __call__(self, batch, deterministic: bool = True):
        return {"logits": self.logits(self.hidden(batch, deterministic))}


# contrastive fine-tuning's model: the decoder's last states pooled (models/heads.py)
finetune_model = heads.decoder_finetune_model(heads.embedder(Gemma3), "gemma3")


def outputs(cfg, params, batch) -> dict:
    """The final RMSNorm's states and the next-token logits of a right-padded batch
    (input_ids, attention_mask), for pretrainx.load."""
    return heads.decoder_outputs(Gemma3(cfg), params, batch)


def attended_keys(cfg, index: int, seq_len: int) -> int:
    """Keys a query reads in layer `index` (counted in full, as MaxText counts causal
    attention): the row, or the window's span in a sliding layer."""
    if is_global(cfg, index):
        return seq_len
    return min(seq_len, cfg.sliding_window if cfg.causal else 2 * window(cfg, index) + 1)


def flops_per_token(cfg, seq_len: int) -> float:
    """Training FLOPs per token (forward x 3): per layer the query and output
    projections (h x H each, H = heads x head_dim), the grouped key and value ones
    (h x KV each), the GeGLU's three h x mlp, scores and weighted sum over the keys the
    layer reads (`attended_keys`), and the h x vocab output."""
    h = cfg.hidden_size
    big_h, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    dense = 2 * (2 * h * big_h + 2 * h * kv + 3 * h * cfg.mlp_dim)
    scores = sum(4 * attended_keys(cfg, i, seq_len) * big_h for i in range(cfg.num_layers))
    return 3.0 * (cfg.num_layers * dense + scores + 2 * h * cfg.vocab_size)
