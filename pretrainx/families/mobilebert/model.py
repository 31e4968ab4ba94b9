"""MobileBERT and its teacher IB-BERT (Sun et al. 2020, google-research/mobilebert).

Both are BERT-Large's 24 layers with a bottleneck in each: the layers pass a
`hidden_size`-wide (512) state between them and work inside at `intra_size` (MobileBERT:
128; IB-BERT: 1,024, an inverted bottleneck). A layer maps x -> `bottleneck_input` (a
dense + norm to intra) -> attention -> `num_ffn` feed-forward networks (stacked, each
with its residual and norm) -> `bottleneck_output` (a dense back to hidden_size, added to
x, normed). Attention reads its queries and keys from a second bottleneck of x
(key_query_shared_bottleneck: MobileBERT), or from x itself (IB-BERT), or from the
input bottleneck (bottleneck_attention: MobileBERT-tiny); its values from x, or the
bottleneck with bottleneck_attention; its residual is the input bottleneck.

MobileBERT's operator changes: `normalization` "no_norm" (x * scale + bias, no statistics) in
place of LayerNorm, ReLU in place of GeLU, and 128-wide word embeddings read as a 3-gram
(each token's vector beside its right and left neighbours', projected to hidden_size:
the paper's kernel-3 convolution). As the released code and HF read it, a padded row's
last token sees [PAD]'s vector on its right and the row's ends see zeros; in a packed
row an example's last token sees [PAD]'s vector and its first sees zeros, what it would
see alone, so packed examples stay apart (model.pad_token_id names [PAD]).

The MLM head transforms hidden -> hidden (dense, act, LayerNorm) and decodes through the
word table [vocab, E] extended by `mlm_extra` [hidden - E, vocab]; NSP reads [CLS]
directly (classifier_activation False) or through a tanh pooler.
"""

import jax
import jax.numpy as jnp
import ml_collections
from flax import linen as nn

from pretrainx.models import heads, layers


def default_config(**family) -> ml_collections.ConfigDict:
    """MobileBERT's model keys (uncased_L-24_H-128_B-512_A-4_F-4_OPT.json)."""
    m = ml_collections.ConfigDict()
    m.family = "mobilebert"
    m.num_layers = 24
    m.hidden_size = 512  # between layers (the paper's inter-block size)
    m.intra_size = 128  # inside a layer (intra-block; true_hidden_size in HF)
    m.num_heads = 4
    m.mlp_dim = 512
    m.num_ffn = 4  # stacked feed-forward networks a layer
    m.embedding_size = 128
    m.trigram = True  # the kernel-3 embedding
    m.vocab_size = 30522
    m.pad_token_id = 0  # [PAD]: the 3-gram's right neighbour past an example's end
    m.max_position_embeddings = 512
    m.type_vocab_size = 2
    m.dropout_rate = 0.0
    m.attention_dropout_rate = 0.1
    m.layer_norm_eps = 1e-12
    m.initializer_range = 0.02
    m.hidden_act = "relu"
    m.normalization = "no_norm"  # | layer_norm (HF: normalization_type)
    m.key_query_shared_bottleneck = True
    m.bottleneck_attention = False  # MobileBERT-tiny: q, k, v from the input bottleneck
    m.classifier_activation = False  # True: a tanh pooler before NSP and classifiers
    m.update(layers.compute_keys(attention=False))
    m.update(family)
    return m


class NoNorm(nn.Module):
    """MobileBERT's NoNorm: an element-wise x * scale + bias."""
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x):
        features = x.shape[-1]
        scale = self.param("scale", nn.with_logical_partitioning(
            nn.initializers.ones, ("embed",)), (features,), jnp.float32)
        bias = self.param("bias", nn.with_logical_partitioning(
            nn.initializers.zeros, ("embed",)), (features,), jnp.float32)
        return (x * scale.astype(self.dtype) + bias.astype(self.dtype)).astype(self.dtype)


def norm_layer(cfg, dtype, name=None, kind=None):
    if (kind or cfg.normalization) == "no_norm":
        return NoNorm(dtype, name=name)
    return layers.LayerNorm(cfg.layer_norm_eps, dtype, name=name)


def _dense(cfg, dtype, features, axes, name, in_dims=1):
    return layers.Dense(features, axes, in_dims=in_dims, dtype=dtype,
                        kernel_init=layers.truncated_normal(cfg.initializer_range), name=name)


class MobileBertLayer(nn.Module):
    cfg: ml_collections.ConfigDict
    dtype: jnp.dtype

    @nn.compact
    def __call__(self, x, segments, deterministic):
        cfg, dtype = self.cfg, self.dtype
        intra, heads_n = cfg.intra_size, cfg.num_heads
        act = layers.activation(cfg.hidden_act)

        def drop(h, rate):
            return layers.Dropout(rate)(h, deterministic=deterministic)

        def bottleneck(name):
            h = _dense(cfg, dtype, intra, ("embed", "mlp"), name)(x)
            return norm_layer(cfg, dtype, f"{name}_norm")(h)

        inner = bottleneck("bottleneck_input")
        if cfg.bottleneck_attention:
            query_in = value_in = inner
        elif cfg.key_query_shared_bottleneck:
            query_in, value_in = bottleneck("bottleneck_attention"), x
        else:
            query_in = value_in = x

        def project(name, h):
            return _dense(cfg, dtype, (heads_n, intra // heads_n), ("mlp", "heads", "kv"), name)(h)

        q, k, v = (jnp.swapaxes(project(n, h), 1, 2) for n, h in
                   (("query", query_in), ("key", query_in), ("value", value_in)))
        scores = jnp.einsum("bhqd,bhkd->bhqk", q * jnp.asarray((intra // heads_n) ** -0.5, dtype),
                            k)
        bias = layers.Mask(segments, segments).dense(dtype)
        probs = jax.nn.softmax(scores.astype(jnp.float32) + bias.astype(jnp.float32), axis=-1)
        probs = probs.astype(dtype)
        self.sow("intermediates", "probs", probs)  # attention transfer reads them
        probs = drop(probs, cfg.attention_dropout_rate)
        out = jnp.swapaxes(jnp.einsum("bhqk,bhkd->bhqd", probs, v), 1, 2)
        out = _dense(cfg, dtype, intra, ("heads", "kv", "mlp"), "out", in_dims=2)(out)
        h = norm_layer(cfg, dtype, "attention_norm")(out + inner)
        for j in range(cfg.num_ffn - 1):  # the stacked feed-forward networks
            f = _dense(cfg, dtype, intra, ("mlp", "embed"), f"ffn_{j}_wo")(
                act(_dense(cfg, dtype, cfg.mlp_dim, ("embed", "mlp"), f"ffn_{j}_wi")(h)))
            h = norm_layer(cfg, dtype, f"ffn_{j}_norm")(f + h)
        f = _dense(cfg, dtype, intra, ("mlp", "embed"), "mlp_wo")(
            act(_dense(cfg, dtype, cfg.mlp_dim, ("embed", "mlp"), "mlp_wi")(h)))
        h = norm_layer(cfg, dtype, "mlp_norm")(f + h)
        out = drop(_dense(cfg, dtype, cfg.hidden_size, ("mlp", "embed"), "bottleneck_output")(h),
                   cfg.dropout_rate)
        x = norm_layer(cfg, dtype, "bottleneck_output_norm")(out + x)
        x = layers.constrain(x, ("batch", "length", "embed"))
        self.sow("intermediates", "hidden", x)  # feature-map transfer reads them
        return x


def trigram(x, segments, pad_vector):
    """[batch, length, 3E]: each token's vector beside its right and left neighbours'
    (HF's order). Past its example's end a token sees `pad_vector` on the right (what a
    padded row gives it), before its start zeros (a row's start); at the row's end zeros."""
    same = (segments[:, 1:] == segments[:, :-1])[..., None]
    following = jnp.where(same, x[:, 1:], pad_vector.astype(x.dtype))
    following = jnp.pad(following, ((0, 0), (0, 1), (0, 0)))
    preceding = jnp.pad(x[:, :-1] * same.astype(x.dtype), ((0, 0), (1, 0), (0, 0)))
    return jnp.concatenate([following, x, preceding], axis=-1)


class MobileBertEncoder(nn.Module):
    """Embeddings + the layer stack; the sequence output [batch, length, hidden]."""
    cfg: ml_collections.ConfigDict

    def setup(self):
        cfg = self.cfg
        self.dtype = jnp.dtype(cfg.dtype)
        init = layers.truncated_normal(cfg.initializer_range)
        self.token_embed = layers.Embed(cfg.vocab_size, cfg.embedding_size, ("vocab", None),
                                        self.dtype, init)
        self.embedding_transformation = _dense(cfg, self.dtype, cfg.hidden_size,
                                               (None, "embed"), None)
        self.position_embed = layers.Embed(cfg.max_position_embeddings, cfg.hidden_size,
                                           ("position", "embed"), self.dtype, init)
        self.type_embed = layers.Embed(cfg.type_vocab_size, cfg.hidden_size,
                                       ("type_vocab", "embed"), self.dtype, init)
        self.embed_norm = norm_layer(cfg, self.dtype)
        self.embed_dropout = layers.Dropout(cfg.dropout_rate)
        self.layers = layers.layer_stack(MobileBertLayer, cfg, self.dtype, cfg.num_layers,
                                         "layer", static_argnums=(3,))

    def __call__(self, input_ids, token_type_ids, attention_mask, deterministic,
                 positions=None):
        x = self.token_embed(input_ids)
        if self.cfg.trigram:
            pad = self.token_embed(jnp.asarray(self.cfg.pad_token_id))
            x = trigram(x, attention_mask, pad)
        x = self.embedding_transformation(x)
        if positions is None:
            positions = layers.every_position(x)
        x = x + self.position_embed(positions) + self.type_embed(token_type_ids)
        x = self.embed_dropout(self.embed_norm(x), deterministic=deterministic)
        x = layers.constrain(x, ("batch", "length", "embed"))
        self.sow("intermediates", "embedded", x)
        return layers.apply_stack(self.layers, x, attention_mask, deterministic)


class MobileBertForPreTraining(nn.Module):
    """MLM logits at the gathered positions and NSP logits, as MobileBertForPreTraining."""
    cfg: ml_collections.ConfigDict

    def setup(self):
        cfg = self.cfg
        self.dtype = jnp.dtype(cfg.dtype)
        self.bert = MobileBertEncoder(cfg)
        self.mlm_transform = _dense(cfg, self.dtype, cfg.hidden_size, ("embed", "mlp"), None)
        self.mlm_norm = layers.LayerNorm(cfg.layer_norm_eps, self.dtype)
        self.mlm_extra = self.param("mlm_extra", nn.with_logical_partitioning(
            layers.truncated_normal(cfg.initializer_range), ("mlp", "vocab")),
            (cfg.hidden_size - cfg.embedding_size, cfg.vocab_size), jnp.float32)
        self.mlm_bias = self.param("mlm_bias", nn.with_logical_partitioning(
            nn.initializers.zeros, ("vocab",)), (cfg.vocab_size,), jnp.float32)
        if cfg.classifier_activation:
            self.pooler = _dense(cfg, self.dtype, cfg.hidden_size, ("embed", "mlp"), None)
        self.nsp = _dense(cfg, self.dtype, 2, ("embed", "classes"), None)

    def encode(self, batch, deterministic):
        return self.bert(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
                         deterministic, batch.get("positions"))

    def mlm_logits(self, x, positions):
        picked = jnp.take_along_axis(x, positions[..., None], axis=1)
        h = layers.activation(self.cfg.hidden_act)(self.mlm_transform(picked))
        h = self.mlm_norm(h)
        e = self.cfg.embedding_size
        logits = (self.bert.token_embed.attend(h[..., :e])
                  + h[..., e:] @ self.mlm_extra.astype(self.dtype)
                  + self.mlm_bias.astype(self.dtype))
        return layers.constrain(logits, ("batch", "pred", "vocab")).astype(jnp.float32)

    def __call__(self, batch, deterministic: bool = True):
        x = self.encode(batch, deterministic)
        if "next_sentence_positions" in batch:  # packed pairs: each example's [CLS]
            first = jnp.take_along_axis(x, batch["next_sentence_positions"][..., None], axis=1)
        else:
            first = x[:, 0]
        if self.cfg.classifier_activation:
            first = jnp.tanh(self.pooler(first))
        return {"mlm_logits": self.mlm_logits(x, batch["masked_lm_positions"]),
                "nsp_logits": self.nsp(first).astype(jnp.float32)}


class MobileBertForFineTuning(heads.TaskModel):
    """The encoder under a task head, as HF's MobileBertFor* heads: [CLS] (through the
    tanh pooler when classifier_activation), dropout, the classifier; tokens and spans
    as BERT's."""

    @nn.compact
    def __call__(self, batch, deterministic: bool = True):
        cfg = self.cfg
        x = MobileBertEncoder(cfg, name="bert")(
            batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], deterministic)
        return heads.task_logits(
            x, batch["attention_mask"], head=self.head, num_labels=self.num_labels,
            deterministic=deterministic, dtype=jnp.dtype(cfg.dtype),
            init=layers.truncated_normal(cfg.initializer_range),
            dropout_rate=cfg.dropout_rate,
            pooler_width=cfg.hidden_size if cfg.classifier_activation else 0)


def flops_per_token(cfg, seq_len: int, max_predictions: int) -> float:
    """Training FLOPs per input token (forward x 3). Per layer and token: the input
    bottleneck (and the shared query-key one), q, k, v and the output projection, the
    scores and weighted sum at intra width, num_ffn feed-forwards and the output
    bottleneck; the embedding's 3E -> hidden projection; the MLM head on
    `max_predictions` rows a sequence."""
    h, i, mlp = cfg.hidden_size, cfg.intra_size, cfg.mlp_dim
    q_in = i if cfg.bottleneck_attention or cfg.key_query_shared_bottleneck else h
    v_in = i if cfg.bottleneck_attention else h
    bottlenecks = (2 if cfg.key_query_shared_bottleneck and not cfg.bottleneck_attention
                   else 1) * h * i
    per_layer = 2 * (bottlenecks + 2 * q_in * i + v_in * i + i * i + cfg.num_ffn * 2 * i * mlp
                     + i * h) + 2 * 2 * seq_len * i
    embed_in = 3 * cfg.embedding_size if cfg.trigram else cfg.embedding_size
    head = max_predictions * 2 * (h * h + h * cfg.vocab_size) + 2 * 2 * h
    return 3.0 * (cfg.num_layers * per_layer + 2 * embed_in * h + head / seq_len)


def outputs(cfg, params, batch) -> dict:
    """The last layer's states and the MLM logits at every position (pretrainx.load)."""
    return heads.mlm_outputs(MobileBertForPreTraining(cfg), params, batch)


def finetune_model(cfg, head: str, num_labels: int, peft) -> MobileBertForFineTuning:
    del peft  # registry.Family(peft=False)
    return MobileBertForFineTuning(cfg, head, num_labels)
