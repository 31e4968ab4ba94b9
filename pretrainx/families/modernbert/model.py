"""ModernBERT (Warner et al. 2024) as answerdotai released it and transformers runs it.

What differs from BERT: no biases in any projection or LayerNorm (only the MLM
decoder's), pre-LN with a LayerNorm after the embeddings and none before the first
layer's attention, a final LayerNorm, GeGLU feed-forward (one input projection to
2 x mlp_dim, GeLU(first half) x second half), rotary positions instead of a position
table, and alternating attention: every `global_attn_every_n_layers`-th layer (0, 3,
6, ...) is global with RoPE base 160,000, the others see 64 tokens on either side
(`local_attention` = 128) with base 10,000. No token types and no pooler; the MLM head
is dense + GeLU + LayerNorm before the tied decoder, computed only at the gathered
positions (the released training code's sparse prediction).

The decoder (model.causal, Ettin's decoders: Weller et al. 2025; HF's
ModernBertDecoderForCausalLM) is the same network with causal attention: each token sees
those before it, and in a local layer only the `local_attention // 2 - 1` before it
(HF's window counts the token itself). Its parameters are the MLM model's, by the same
paths, so a checkpoint moves between the two objectives (`init_from`).

Packed rows: `attention_mask` carries segment ids (1, 2, ... per example, 0 on padding)
and `positions` restart in every example, so each packed document sees only itself, as
the released model's unpadded batches do. model.scan_layers scans groups of one global
layer and the local ones after it (`layers_from_3`, the first group and the remainder
unrolled: `layer_plan`), whose parameters interop unstacks into layer_N for export.
"""

import math

import jax.numpy as jnp
import ml_collections
from flax import linen as nn

from pretrainx.models import heads, layers, mha
from pretrainx.models.gated import GatedMlp


def default_config(causal: bool = False, pooling: str = "") -> ml_collections.ConfigDict:
    """ModernBERT-base's model keys (answerdotai/ModernBERT-base's config.json); with
    `causal`, its decoder's (Ettin's); `pooling`: the classifier's, if not theirs."""
    m = ml_collections.ConfigDict()
    m.family = "modernbert"
    m.num_layers = 22
    m.hidden_size = 768
    m.num_heads = 12
    m.mlp_dim = 1152  # each half of the GeGLU's 2,304-wide input projection
    m.vocab_size = 50368
    m.max_position_embeddings = 8192  # no table: the longest row RoPE was trained for
    m.layer_norm_eps = 1e-5
    m.initializer_range = 0.02
    m.hidden_act = "gelu"  # exact GeLU, in the GeGLU and the MLM head
    m.global_rope_theta = 160_000.0
    m.local_rope_theta = 10_000.0
    m.global_attn_every_n_layers = 3
    m.local_attention = 128  # the local window's width: half of it on each side
    m.dropout_rate = 0.0  # embeddings and the GeGLU (HF: embedding_dropout, mlp_dropout)
    m.attention_dropout_rate = 0.0
    # cls | mean | last: what a sequence classifier reads (a decoder's last token is
    # the one that has read the whole row)
    m.classifier_pooling = pooling or ("last" if causal else "cls")
    m.classifier_dropout = 0.0
    m.update(layers.compute_keys())
    m.tie_output = True  # False: the decoder has a kernel of its own (tie_word_embeddings)
    m.causal = causal  # True: the decoder (each token sees only those before it)
    return m


def causal(cfg) -> bool:
    """Whether `cfg` is the decoder (configs saved before the key existed are encoders)."""
    return bool(cfg.causal)


def window(cfg, index: int) -> int:
    """Layer `index`'s attention.Mask window: 0 (global), or how far a key may be."""
    if is_global(cfg, index):
        return 0
    return cfg.local_attention // 2 - (1 if causal(cfg) else 0)


def is_global(cfg, index: int) -> bool:
    return index % cfg.global_attn_every_n_layers == 0


def _inits(cfg):
    """The released initialisation: N(0, 0.02) cut at two sigmas in, and /sqrt(2L) on
    every projection back into the residual stream."""
    std = cfg.initializer_range
    return (layers.truncated_normal(std),
            layers.truncated_normal(std / math.sqrt(2.0 * cfg.num_layers)))


class ModernBertLayer(nn.Module):
    cfg: ml_collections.ConfigDict
    dtype: jnp.dtype
    index: int
    decode: bool = False  # the decoder sampled token by token from a key-value cache

    @nn.compact
    def __call__(self, x, rows, positions, deterministic):
        """`rows`: the stack's attention.Mask (segments, causal, a PrefixLM's prefix),
        given this layer's window here."""
        cfg, glob = self.cfg, is_global(self.cfg, self.index)
        init, out_init = _inits(cfg)
        norm = lambda name: layers.LayerNorm(cfg.layer_norm_eps, self.dtype, use_bias=False,  # noqa: E731
                                             name=name)
        h = x if self.index == 0 else norm("attention_norm")(x)
        reach = window(cfg, self.index)
        mask = rows.replace(window=reach)
        attn = mha.MultiHeadAttention(
            num_heads=cfg.num_heads, head_dim=cfg.hidden_size // cfg.num_heads,
            dropout_rate=cfg.attention_dropout_rate, use_bias=False, dtype=self.dtype,
            kernel_init=init, out_init=out_init, float32_logits=cfg.float32_attention_logits,
            impl=cfg.attention_impl,
            rotary=mha.Rotary(cfg.global_rope_theta if glob else cfg.local_rope_theta),
            decoding=mha.Decoding(window=reach) if self.decode else None,
            name="attention")(h, h, mask, deterministic, positions)
        attn = layers.Dropout(cfg.attention_dropout_rate)(attn, deterministic=deterministic)
        x = layers.constrain(x + attn, ("batch", "length", "embed"))
        h = GatedMlp(cfg.mlp_dim, cfg.hidden_act, cfg.dropout_rate, self.dtype, init, out_init,
                     name="mlp")(norm("mlp_norm")(x), deterministic)
        return layers.constrain(x + h, ("batch", "length", "embed"))


class ModernBertGroup(nn.Module):
    """One global layer and the local ones up to the next (a scan's body): the layers
    at group positions 0, 1, ... of any group after the first, whose first layer alone
    has no attention norm."""
    cfg: ml_collections.ConfigDict
    dtype: jnp.dtype

    @nn.compact
    def __call__(self, x, rows, positions, deterministic):
        every = self.cfg.global_attn_every_n_layers
        for j in range(every):  # index every + j: global at j = 0, never the first layer
            x = ModernBertLayer(self.cfg, self.dtype, every + j, name=f"sub_{j}")(
                x, rows, positions, deterministic)
        return x


def layer_plan(cfg) -> tuple:
    """(unrolled first layers, scanned groups, unrolled last layers) of the stack: with
    scan_layers the first group (its first layer differs) and the remainder past the
    last whole group are unrolled, the groups between are one nn.scan."""
    every, n = cfg.global_attn_every_n_layers, cfg.num_layers
    if not cfg.scan_layers or n < 2 * every:
        return n, 0, 0
    groups = (n - every) // every
    return every, groups, n - every - groups * every


class ModernBertEncoder(nn.Module):
    """Token embeddings + LayerNorm, the layers, the final LayerNorm. With scan_layers
    the groups of one global and the local layers after it are scanned
    (`layers_from_N`), so the program does not grow with depth. `decode` (the decoder
    sampled from a key-value cache) unrolls them: interop.load's parameters are."""
    cfg: ml_collections.ConfigDict
    decode: bool = False

    def setup(self):
        cfg = self.cfg
        self.dtype = jnp.dtype(cfg.dtype)
        init, _ = _inits(cfg)
        self.token_embed = layers.Embed(cfg.vocab_size, cfg.hidden_size, ("vocab", "embed"),
                                        self.dtype, init)
        self.embed_norm = layers.LayerNorm(cfg.layer_norm_eps, self.dtype, use_bias=False)
        self.embed_dropout = layers.Dropout(cfg.dropout_rate)
        cls = ModernBertLayer
        if cfg.remat != "none" and not self.decode:
            cls = nn.remat(cls, policy=layers.REMAT_POLICIES[cfg.remat], static_argnums=(4,))
        first, groups, last = (cfg.num_layers, 0, 0) if self.decode else layer_plan(cfg)
        every, stack = cfg.global_attn_every_n_layers, []
        if groups:
            stack = layers.layer_stack(ModernBertGroup, cfg, self.dtype, groups, "group",
                                       static_argnums=(4,), stack_name=f"layers_from_{first}")
        tail = range(first + groups * every, cfg.num_layers)
        self.layers = ([cls(cfg, self.dtype, i, self.decode, name=f"layer_{i}")
                        for i in range(first)]
                       + stack + [cls(cfg, self.dtype, i, name=f"layer_{i}") for i in tail])
        self.final_norm = layers.LayerNorm(cfg.layer_norm_eps, self.dtype, use_bias=False)

    def __call__(self, input_ids, segments, positions, deterministic, prefix=None):
        """`prefix` (bool [batch, length], the decoder's PrefixLM): seen both ways."""
        if positions is None:
            positions = jnp.broadcast_to(jnp.arange(input_ids.shape[1]), input_ids.shape)
        x = self.embed_dropout(self.embed_norm(self.token_embed(input_ids)),
                               deterministic=deterministic)
        x = layers.constrain(x, ("batch", "length", "embed"))
        rows = layers.Mask(segments, segments, causal=causal(self.cfg), kv_prefix=prefix)
        for layer in self.layers:
            x = layer(x, rows, positions, deterministic)
        return self.final_norm(x)


class PredictionHead(nn.Module):
    """dense (no bias) + GeLU + LayerNorm: before the MLM decoder and every task head."""
    cfg: ml_collections.ConfigDict

    @nn.compact
    def __call__(self, x):
        cfg, dtype = self.cfg, jnp.dtype(self.cfg.dtype)
        _, out_init = _inits(cfg)
        h = layers.Dense(cfg.hidden_size, ("embed", "mlp"), use_bias=False, dtype=dtype,
                         kernel_init=out_init, name="dense")(x)
        h = layers.activation(cfg.hidden_act)(h)
        return layers.LayerNorm(cfg.layer_norm_eps, dtype, use_bias=False, name="norm")(h)


class ModernBertForMaskedLM(nn.Module):
    """The encoder and the MLM head at the gathered positions (sparse prediction)."""
    cfg: ml_collections.ConfigDict
    decode: bool = False  # the decoder's sampler (ModernBertForCausalLM)

    def setup(self):
        self.model = ModernBertEncoder(self.cfg, self.decode)
        self.head = PredictionHead(self.cfg)
        self.mlm_bias = self.param("mlm_bias", nn.with_logical_partitioning(
            nn.initializers.zeros, ("vocab",)), (self.cfg.vocab_size,), jnp.float32)
        self.output = layers.output_layer(self.cfg, jnp.dtype(self.cfg.dtype),
                                          _inits(self.cfg)[0])

    def mlm_logits(self, x, positions):
        picked = jnp.take_along_axis(x, positions[..., None], axis=1)
        h = layers.constrain(self.head(layers.constrain(picked, ("batch", "pred", "embed"))),
                             ("batch", "pred", "embed"))
        logits = (layers.vocab_logits(self.model.token_embed, self.output, h)
                  + self.mlm_bias.astype(h.dtype))
        return layers.constrain(logits, ("batch", "pred", "vocab")).astype(jnp.float32)

    def encode(self, batch, deterministic: bool):
        """[batch, length, embed]: the final LayerNorm's states of a padded or packed batch
        (the decoder's PrefixLM: its `prefix` seen both ways)."""
        return self.model(*layers.packed_inputs(batch), deterministic, layers.prefix_of(batch))

    def __call__(self, batch, deterministic: bool = True):
        x = self.encode(batch, deterministic)
        return {"mlm_logits": self.mlm_logits(x, batch["masked_lm_positions"])}


class ModernBertForCausalLM(ModernBertForMaskedLM):
    """The decoder (model.causal): the same parameters, the head and the tied decoder at
    every position, each predicting the next token. Reads the encoder's batch keys
    (input_ids, attention_mask, positions) or the sampler's (inputs, segment_ids,
    positions: sampling.py); `decode` steps through a key-value cache."""

    def __call__(self, batch, deterministic: bool = True):
        if "inputs" in batch:
            batch = {"input_ids": batch["inputs"], "attention_mask": batch["segment_ids"],
                     "positions": batch["positions"],
                     **({"prefix": batch["prefix"]} if "prefix" in batch else {})}
        x = self.encode(batch, deterministic)
        return {"logits": self.mlm_logits(x, layers.every_position(x))}


def sampler(cfg) -> ModernBertForCausalLM:
    """The decoder with a key-value cache, for python -m pretrainx.generate."""
    cfg = ml_collections.ConfigDict(cfg.to_dict())
    cfg.scan_layers = False
    return ModernBertForCausalLM(cfg, decode=True)


def outputs(cfg, params, batch) -> dict:
    """`encode`'s states and the MLM (or the decoder's next-token) logits at every
    position, for pretrainx.load."""
    network = ModernBertForCausalLM(cfg) if causal(cfg) else ModernBertForMaskedLM(cfg)
    return heads.mlm_outputs(network, params, batch)


class ModernBertForFineTuning(heads.TaskModel):
    """HF's ModernBertFor{SequenceClassification, TokenClassification, QuestionAnswering}:
    the prediction head on [CLS] (or the mean of real tokens, classifier_pooling) or on
    every token, dropout, and a linear classifier initialised at N(0, 1/hidden)."""

    @nn.compact
    def __call__(self, batch, deterministic: bool = True):
        cfg = self.cfg
        x = ModernBertEncoder(cfg, name="model")(*layers.packed_inputs(batch), deterministic)
        if self.head.startswith("embed_"):  # the last states pooled, as sentence-transformers
            return heads.task_logits(x, batch["attention_mask"], head=self.head, num_labels=0,
                                     deterministic=deterministic, dtype=jnp.dtype(cfg.dtype),
                                     init=None, dropout_rate=0.0)
        if self.head == "classify":
            x = heads.pool(x, batch["attention_mask"], cfg.classifier_pooling)
        return heads.task_logits(
            PredictionHead(cfg, name="head")(x), batch["attention_mask"], head=self.head,
            num_labels=self.num_labels, deterministic=deterministic,
            dtype=jnp.dtype(cfg.dtype), init=layers.truncated_normal(cfg.hidden_size ** -0.5),
            dropout_rate=cfg.classifier_dropout, pooling="none", dropout_on_span=True)


def finetune_model(cfg, head: str, num_labels: int, peft) -> ModernBertForFineTuning:
    return ModernBertForFineTuning(cfg, head, num_labels)


def flops_per_token(cfg, seq_len: int, max_predictions: int) -> float:
    """Training FLOPs per token (forward x 3): per layer 4 h x h projections and the
    GeGLU's 3 h x mlp; attention scores and sums over the keys a query may see (all
    `seq_len` in a global layer, at most local_attention + 1 in a local one); the MLM
    head (h x h and h x vocab) at `max_predictions` positions per row."""
    h, mlp = cfg.hidden_size, cfg.mlp_dim
    attention = 0
    for i in range(cfg.num_layers):
        keys = seq_len if is_global(cfg, i) else min(seq_len, cfg.local_attention + 1)
        attention += 2 * 2 * keys * h
    dense = cfg.num_layers * 2 * (4 * h * h + 3 * h * mlp)
    head = max_predictions * 2 * (h * h + h * cfg.vocab_size) / seq_len
    return 3.0 * (dense + attention + head)
