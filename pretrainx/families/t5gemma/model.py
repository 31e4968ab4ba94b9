"""T5Gemma (Zhang et al. 2025): an encoder-decoder of Gemma 2 blocks, as transformers'
T5GemmaForConditionalGeneration defines it.

Both stacks: token embeddings scaled by sqrt(width), Gemma's RMSNorm (1 + scale), pre-
and post-norms around every sub-layer, grouped-query attention with rotary positions,
scores scaled by query_pre_attn_scalar^-0.5 and soft-capped (cap * tanh(s / cap)),
GeGLU feed-forward, sliding-window layers alternating with global ones (the window
`sliding_window` keys either side in the encoder; the query and the window - 1 before
it in the decoder). The encoder is bidirectional; each decoder layer attends causally
to itself, then (without positions) to the encoder's output, then its feed-forward.
The logits come from the decoder's word table (tied) and are soft-capped.

The two stacks may differ in size (T5Gemma's 9B-2B): the encoder's shape is the model's
own keys (num_layers, hidden_size, ...), the decoder's the decoder_* keys. Packed rows
carry *_segment_ids and *_positions as T5's.
"""

import jax.numpy as jnp
import ml_collections
from flax import linen as nn

from pretrainx.models import decoding, layers, mha
from pretrainx.models.gated import GatedMlp

STACK_KEYS = ("num_layers", "hidden_size", "mlp_dim", "num_heads", "num_kv_heads",
              "head_dim", "query_pre_attn_scalar", "sliding_window")


def default_config() -> ml_collections.ConfigDict:
    """T5Gemma 2B-2B's keys (google/t5gemma-2b-2b-*: Gemma 2 2B as both stacks)."""
    m = ml_collections.ConfigDict()
    m.family = "t5gemma"
    m.vocab_size = 256000
    m.num_layers = 26  # the encoder's shape
    m.hidden_size = 2304
    m.mlp_dim = 9216
    m.num_heads = 8
    m.num_kv_heads = 4
    m.head_dim = 256
    m.query_pre_attn_scalar = 256
    m.sliding_window = 4096
    m.num_decoder_layers = 26  # the decoder's shape
    m.decoder_hidden_size = 2304
    m.decoder_mlp_dim = 9216
    m.decoder_num_heads = 8
    m.decoder_num_kv_heads = 4
    m.decoder_head_dim = 256
    m.decoder_query_pre_attn_scalar = 256
    m.decoder_sliding_window = 4096
    m.hidden_act = "gelu_tanh"
    m.rms_norm_eps = 1e-6
    m.rope_theta = 10000.0
    m.attn_logit_softcapping = 50.0
    m.final_logit_softcapping = 30.0
    m.tie_output = True  # the output layer is the decoder's word table
    m.dropout_rate = 0.0
    m.attention_dropout_rate = 0.0
    m.initializer_range = 0.02
    m.update(layers.compute_keys())
    return m


def stack(cfg, decoder: bool) -> ml_collections.ConfigDict:
    """One stack's shape as plain keys (num_layers, hidden_size, ...)."""
    if not decoder:
        return ml_collections.ConfigDict({k: cfg[k] for k in STACK_KEYS})
    out = {k: cfg[f"decoder_{k}"] for k in STACK_KEYS if k != "num_layers"}
    return ml_collections.ConfigDict(dict(out, num_layers=cfg.num_decoder_layers))


def is_global(index: int) -> bool:
    """Gemma 2's pattern: sliding-window layers at even indices, global at odd."""
    return index % 2 == 1


class Block(nn.Module):
    """One layer of either stack; `cross` (the decoder's) adds attention to `encoded`."""
    cfg: ml_collections.ConfigDict
    shape: ml_collections.ConfigDict
    dtype: jnp.dtype
    index: int
    cross: bool = False

    @nn.compact
    def __call__(self, x, rows: layers.Mask, positions, encoded, cross_rows, deterministic):
        cfg, shape = self.cfg, self.shape
        init = nn.initializers.normal(cfg.initializer_range)
        def norm(name):
            return layers.RMSNorm(cfg.rms_norm_eps, self.dtype, plus_one=True, name=name)

        def drop(t):
            return layers.Dropout(cfg.dropout_rate)(t, deterministic=deterministic)

        def attention(name, rotary):
            return mha.MultiHeadAttention(
                num_heads=shape.num_heads, head_dim=shape.head_dim, kv_heads=shape.num_kv_heads,
                query_scale=shape.query_pre_attn_scalar ** -0.5, use_bias=False,
                dropout_rate=cfg.attention_dropout_rate, dtype=self.dtype, kernel_init=init,
                float32_logits=cfg.float32_attention_logits, impl=cfg.attention_impl,
                logit_softcap=cfg.attn_logit_softcapping,
                rotary=mha.Rotary(cfg.rope_theta) if rotary else None, name=name)

        window = 0 if is_global(self.index) else (
            shape.sliding_window - 1 if rows.causal else shape.sliding_window)
        h = norm("self_attention_norm")(x)
        y = attention("self_attention", True)(h, h, rows.replace(window=window), deterministic,
                                              positions)
        x = layers.constrain(x + drop(norm("post_self_attention_norm")(y)),
                             ("batch", "length", "embed"))
        if self.cross:
            h = norm("cross_attention_norm")(x)
            y = attention("cross_attention", False)(h, encoded, cross_rows, deterministic)
            x = layers.constrain(x + drop(norm("post_cross_attention_norm")(y)),
                                 ("batch", "length", "embed"))
        y = GatedMlp(shape.mlp_dim, cfg.hidden_act, 0.0, self.dtype, init, init,
                     name="mlp")(norm("mlp_norm")(x), deterministic)
        return layers.constrain(x + drop(norm("post_mlp_norm")(y)), ("batch", "length", "embed"))


class T5Gemma(nn.Module):
    """(batch of packed inputs/targets) -> decoder logits [batch, targets_length, vocab]."""
    cfg: ml_collections.ConfigDict

    def setup(self):
        cfg = self.cfg
        self.dtype = jnp.dtype(cfg.dtype)
        init = nn.initializers.normal(cfg.initializer_range)
        enc, dec = stack(cfg, False), stack(cfg, True)
        self.encoder_embed = layers.Embed(cfg.vocab_size, enc.hidden_size, ("vocab", "embed"),
                                          self.dtype, init)
        self.decoder_embed = layers.Embed(cfg.vocab_size, dec.hidden_size, ("vocab", "embed"),
                                          self.dtype, init)
        remat = lambda cls: (nn.remat(cls, policy=layers.REMAT_POLICIES[cfg.remat],  # noqa: E731
                                      static_argnums=(6,)) if cfg.remat != "none" else cls)
        self.encoder_layers = [remat(Block)(cfg, enc, self.dtype, i, name=f"encoder_{i}")
                               for i in range(enc.num_layers)]
        self.decoder_layers = [remat(Block)(cfg, dec, self.dtype, i, True, name=f"decoder_{i}")
                               for i in range(dec.num_layers)]
        self.encoder_norm = layers.RMSNorm(cfg.rms_norm_eps, self.dtype, plus_one=True)
        self.decoder_norm = layers.RMSNorm(cfg.rms_norm_eps, self.dtype, plus_one=True)
        self.dropout = layers.Dropout(cfg.dropout_rate)
        if not cfg.tie_output:
            self.output = layers.Dense(cfg.vocab_size, ("embed", "vocab"), use_bias=False,
                                       dtype=self.dtype, kernel_init=init)

    def _embedded(self, table, tokens, width, deterministic):
        scale = jnp.asarray(width ** 0.5, self.dtype)  # rounded to the dtype, as HF's
        x = self.dropout(table(tokens) * scale, deterministic)
        return layers.constrain(x, ("batch", "length", "embed"))

    def encode(self, tokens, segment_ids, deterministic, positions=None):
        x = self._embedded(self.encoder_embed, tokens, self.cfg.hidden_size, deterministic)
        rows = layers.Mask(segment_ids, segment_ids)
        for layer in self.encoder_layers:
            x = layer(x, rows, positions, None, None, deterministic)
        return self.dropout(self.encoder_norm(x), deterministic)

    def decode(self, encoded, encoder_segment_ids, decoder_input_tokens, decoder_segment_ids,
               deterministic, positions=None):
        x = self._embedded(self.decoder_embed, decoder_input_tokens,
                           self.cfg.decoder_hidden_size, deterministic)
        rows = layers.Mask(decoder_segment_ids, decoder_segment_ids, causal=True)
        cross = layers.Mask(decoder_segment_ids, encoder_segment_ids)
        for layer in self.decoder_layers:
            x = layer(x, rows, positions, encoded, cross, deterministic)
        x = self.dropout(self.decoder_norm(x), deterministic)
        logits = (self.decoder_embed.attend(x) if self.cfg.tie_output else self.output(x))
        cap = self.cfg.final_logit_softcapping
        if cap:
            logits = cap * jnp.tanh(logits.astype(jnp.float32) / cap)
        return layers.constrain(logits, ("batch", "length", "vocab"))

    def __call__(self, batch, deterministic: bool = True):
        encoded = self.encode(batch["encoder_input_tokens"], batch["encoder_segment_ids"],
                              deterministic, batch.get("encoder_positions"))
        logits = self.decode(encoded, batch["encoder_segment_ids"],
                             batch["decoder_input_tokens"], batch["decoder_segment_ids"],
                             deterministic, batch.get("decoder_positions"))
        return {"logits": logits.astype(jnp.float32)}


def outputs(cfg, params, batch) -> dict:
    """For pretrainx.load: the encoder's last states and the decoder's logits as it reads
    the same rows shifted right from the start token (pad, 0)."""
    ids, mask = batch["input_ids"], batch["attention_mask"]
    shifted = jnp.concatenate([jnp.zeros_like(ids[:, :1]), ids[:, :-1]], axis=1)

    def run(net):
        encoded = net.encode(ids, mask, True)
        logits = net.decode(encoded, mask, shifted, mask, True)
        return {"hidden_states": encoded, "logits": logits.astype(jnp.float32)}
    return T5Gemma(cfg).apply({"params": params}, method=run)


def generate(cfg, params, tokens, segment_ids, length: int, eos_id: int, pad_id: int,
             num_beams: int = 1):
    """[batch, length] greedy outputs from id 0, the decoder rerun on the prefix."""
    del eos_id, pad_id
    if num_beams != 1:
        raise ValueError("T5Gemma decodes greedily here (num_beams=1)")
    return decoding.encoder_decoder(T5Gemma(cfg), params, tokens, segment_ids, length)


def flops_per_example(cfg, inputs_length: int, targets_length: int) -> float:
    """Training FLOPs of one packed row (forward x 3), 2 FLOPs a multiply-add: each stack's
    projections (queries and outputs heads x head_dim wide, keys and values kv_heads x
    head_dim), GeGLU (3 matrices), scores and weighted sums; the decoder's cross-attention
    keys and values once per encoder token; the output layer per target token."""
    enc, dec = stack(cfg, False), stack(cfg, True)

    def attention(s, d_in):  # per token: q and o from the stack's width, k and v from d_in
        inner, kv = s.num_heads * s.head_dim, s.num_kv_heads * s.head_dim
        return 2 * s.hidden_size * inner, 2 * d_in * kv, inner

    q_o, k_v, inner = attention(enc, enc.hidden_size)
    encoder = enc.num_layers * inputs_length * (q_o + k_v + 3 * enc.hidden_size * enc.mlp_dim
                                                + 2 * inputs_length * inner)
    q_o, k_v, inner = attention(dec, dec.hidden_size)
    cross_q_o, cross_k_v, _ = attention(dec, enc.hidden_size)
    decoder = dec.num_layers * (
        targets_length * (q_o + k_v + 2 * targets_length * inner + cross_q_o
                          + 2 * inputs_length * inner + 3 * dec.hidden_size * dec.mlp_dim)
        + inputs_length * cross_k_v)
    return 3.0 * 2.0 * (encoder + decoder + targets_length * dec.hidden_size * cfg.vocab_size)
