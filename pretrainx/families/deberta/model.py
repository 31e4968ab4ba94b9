"""DeBERTa-v2/v3's encoder (He et al. 2021, 2023), as microsoft/DeBERTa and HF's
DebertaV2Model compute it.

* No absolute positions in the encoder (position_biased_input False): attention is
  disentangled. For heads of width d, query q_i, key k_j and the relative position
  embeddings r (one table of 2 x position_buckets rows, LayerNorm'ed, shared by every
  layer), with delta(i, j) the bucket of i - j shifted into [0, 2 x buckets):
      score(i, j) = [q_i . k_j + q_i . Wk r_delta(i,j) + k_j . Wq r_delta(i,j)] / sqrt(3d)
  (content-to-content, content-to-position, position-to-content). With
  share_att_key the position projections are the content key/query projections.
* Relative distances beyond position_buckets / 2 share log-spaced buckets up to
  max_relative_positions (512 and 256 in the v3 checkpoints).
* Post-LN layers as BERT's; word embeddings, LayerNorm, zeroed padding; no pooler.
* The MLM head (`DebertaForMaskedLM`) is BERT's (dense, activation, LayerNorm, the tied
  word table); with model.enhanced_mask_decoder (the v2 MLM recipe) it reads the
  enhanced mask decoder's output: absolute position embeddings added to the
  second-to-last layer's output form the queries of the last layer, applied twice
  with its own weights (keys and values from that second-to-last output).

Packed rows keep segments apart: attention is masked by segment ids (model.type_vocab
size 0: no segment embeddings, as v3).
"""

import math

import jax
import jax.numpy as jnp
import ml_collections
from flax import linen as nn

from pretrainx.models import heads, layers
from pretrainx.families.bert import model as bert
from pretrainx.models import transformer_encoder as enc


def default_config(enhanced_mask_decoder: bool = False,
                   **objective) -> ml_collections.ConfigDict:
    """DeBERTa-v3-base's model keys (microsoft/deberta-v3-base's config.json), with an
    objective's own (`objective`: the generator's depth)."""
    return bert.default_config(
        family="deberta",
        attention_impl=bert.OMIT,  # disentangled attention has no fused kernel: XLA's path
        vocab_size=128100, type_vocab_size=0, hidden_act="gelu", layer_norm_eps=1e-7,
        position_buckets=256, max_relative_positions=512, share_att_key=True,
        # True: the v2 MLM recipe's EMD before the head
        enhanced_mask_decoder=enhanced_mask_decoder,
        # disentangled attention and its own layer: BERT's architecture keys do not apply
        **{key: bert.OMIT for key in (*enc.MODIFICATIONS, "rope_theta", "position_offset",
                                      "pooler_activation")}, **objective)


def flops_per_layer(cfg, seq_len: int) -> float:
    """Forward FLOPs per token of one layer: BERT's terms plus the relative terms
    (content against 2B position rows for c2p and p2c, and their projections)."""
    h, rel = cfg.hidden_size, 2 * cfg.position_buckets
    return (2 * (4 * h * h + 2 * h * cfg.mlp_dim) + 2 * 2 * seq_len * h + 2 * 2 * rel * h
            + 2 * 2 * rel * h * h / seq_len)


def log_buckets(relative, buckets: int, max_position: int):
    """microsoft/DeBERTa's make_log_bucket_position: distances under buckets / 2 kept,
    longer ones on a log scale up to max_position, the sign kept."""
    mid = buckets // 2
    sign = jnp.sign(relative)
    near = (relative < mid) & (relative > -mid)
    magnitude = jnp.where(near, mid - 1, jnp.abs(relative)).astype(jnp.float32)
    log_pos = jnp.ceil(jnp.log(magnitude / mid) / math.log((max_position - 1) / mid)
                       * (mid - 1)) + mid
    return jnp.where(magnitude <= mid, relative.astype(jnp.float32), log_pos * sign).astype(
        jnp.int32)


def relative_index(length: int, cfg):
    """[length, length] rows of the relative table: bucket(i - j) + buckets, clipped."""
    pos = jnp.arange(length)
    relative = pos[:, None] - pos[None, :]
    span = cfg.position_buckets
    if span > 0:
        relative = log_buckets(relative, span, cfg.max_relative_positions)
    return jnp.clip(relative + span, 0, 2 * span - 1)


class DisentangledAttention(nn.Module):
    cfg: ml_collections.ConfigDict
    dtype: jnp.dtype

    @nn.compact
    def __call__(self, query_states, kv_states, rel, index, bias, deterministic):
        cfg = self.cfg
        heads, head_dim = cfg.num_heads, cfg.hidden_size // cfg.num_heads
        init = layers.truncated_normal(cfg.initializer_range)

        def projection(name):
            return layers.Dense((heads, head_dim), ("embed", "heads", "kv"), dtype=self.dtype,
                                kernel_init=init, name=name)

        query, key, value = projection("query"), projection("key"), projection("value")
        if cfg.share_att_key:
            pos_query, pos_key = query, key
        else:
            pos_query, pos_key = projection("pos_query"), projection("pos_key")
        head_major = lambda t: jnp.swapaxes(t, 1, 2)  # [batch, heads, length, kv]
        q, k, v = head_major(query(query_states)), head_major(key(kv_states)), head_major(
            value(kv_states))
        rel = layers.Dropout(cfg.dropout_rate)(rel, deterministic=deterministic)
        rq, rk = pos_query(rel), pos_key(rel)  # [2 x buckets, heads, kv]
        scale = jnp.asarray(1.0 / math.sqrt(head_dim * 3), self.dtype)
        c2c = jnp.einsum("bhqd,bhkd->bhqk", q, k)
        c2p = jnp.take_along_axis(jnp.einsum("bhqd,rhd->bhqr", q, rk),
                                  jnp.broadcast_to(index, c2c.shape), axis=-1)
        p2c = jnp.take_along_axis(jnp.einsum("bhkd,rhd->bhkr", k, rq),
                                  jnp.broadcast_to(index.T, c2c.shape), axis=-1)
        scores = (c2c + c2p + jnp.swapaxes(p2c, -1, -2)) * scale
        probs = jax.nn.softmax(scores.astype(jnp.float32) + bias.astype(jnp.float32), axis=-1)
        probs = probs.astype(self.dtype)
        self.sow("intermediates", "probs", probs)
        probs = layers.Dropout(cfg.attention_dropout_rate)(probs, deterministic=deterministic)
        out = jnp.swapaxes(jnp.einsum("bhqk,bhkd->bhqd", probs, v), 1, 2)
        out = layers.constrain(out, ("batch", "length", "heads", "kv"))
        return layers.Dense(query_states.shape[-1], ("heads", "kv", "embed"), in_dims=2,
                            dtype=self.dtype, kernel_init=init, name="out")(out)


class DebertaLayer(nn.Module):
    """Post-LN: LN(x + attention), LN(h + MLP(h)); `query_states` (the EMD) attends to
    `kv_states` and is the residual."""
    cfg: ml_collections.ConfigDict
    dtype: jnp.dtype

    @nn.compact
    def __call__(self, kv_states, rel, index, bias, deterministic, query_states=None):
        cfg = self.cfg
        query_states = kv_states if query_states is None else query_states
        init = layers.truncated_normal(cfg.initializer_range)
        attn = DisentangledAttention(cfg, self.dtype, name="attention")(
            query_states, kv_states, rel, index, bias, deterministic)
        attn = layers.Dropout(cfg.dropout_rate)(attn, deterministic=deterministic)
        x = layers.LayerNorm(cfg.layer_norm_eps, self.dtype, name="attention_norm")(
            query_states + attn)
        h = layers.Mlp(cfg.mlp_dim, cfg.hidden_act, self.dtype, init, name="mlp")(
            x, deterministic)
        h = layers.Dropout(cfg.dropout_rate)(h, deterministic=deterministic)
        x = layers.LayerNorm(cfg.layer_norm_eps, self.dtype, name="mlp_norm")(x + h)
        x = layers.constrain(x, ("batch", "length", "embed"))
        self.sow("intermediates", "hidden", x)
        return x


class DebertaEncoder(nn.Module):
    """Embeddings, the relative table and the layers; returns the last two layers'
    outputs (the EMD reads the second-to-last), the relative table, its index and the
    attention bias.

    residual_embeddings (DeBERTa-v3's discriminator, gradient-disentangled embedding
    sharing): the word table starts at zero and is added to `shared_table` (the
    generator's) under stop_gradient: E_D = sg(E_G) + E_delta."""
    cfg: ml_collections.ConfigDict
    residual_embeddings: bool = False

    def setup(self):
        cfg = self.cfg
        self.dtype = jnp.dtype(cfg.dtype)
        init = layers.truncated_normal(cfg.initializer_range)
        self.token_embed = layers.Embed(cfg.vocab_size, cfg.hidden_size, ("vocab", "embed"),
                                        self.dtype, nn.initializers.zeros
                                        if self.residual_embeddings else init)
        if cfg.type_vocab_size:
            self.type_embed = layers.Embed(cfg.type_vocab_size, cfg.hidden_size,
                                           ("type_vocab", "embed"), self.dtype, init)
        self.embed_norm = layers.LayerNorm(cfg.layer_norm_eps, self.dtype)
        self.embed_dropout = layers.Dropout(cfg.dropout_rate)
        self.rel_embed = layers.Embed(2 * cfg.position_buckets, cfg.hidden_size,
                                      ("position", "embed"), self.dtype, init)
        self.rel_norm = layers.LayerNorm(cfg.layer_norm_eps, self.dtype)
        self.layers = [DebertaLayer(cfg, self.dtype, name=f"layer_{i}")
                       for i in range(cfg.num_layers)]

    def __call__(self, input_ids, token_type_ids, attention_mask, deterministic,
                 shared_table=None):
        cfg = self.cfg
        if shared_table is None:
            x = self.token_embed(input_ids)
        else:
            table = jax.lax.stop_gradient(shared_table) + self.token_embed.embedding
            x = jnp.take(table, input_ids, axis=0).astype(self.dtype)
        if cfg.type_vocab_size:
            x = x + self.type_embed(jnp.minimum(token_type_ids, cfg.type_vocab_size - 1))
        x = self.embed_norm(x) * (attention_mask > 0)[..., None].astype(self.dtype)
        x = layers.constrain(self.embed_dropout(x, deterministic=deterministic),
                             ("batch", "length", "embed"))
        self.sow("intermediates", "embedded", x)
        rel = self.rel_norm(self.rel_embed.embedding.astype(self.dtype))
        index = relative_index(input_ids.shape[1], cfg)
        # attention_mask doubles as segment ids: packed examples never see each other.
        bias = layers.mask_to_bias(layers.segment_mask(attention_mask, attention_mask),
                                   self.dtype)
        previous = x
        for layer in self.layers:
            previous, x = x, layer(x, rel, index, bias, deterministic)
        return x, previous, rel, index, bias


class DebertaForMaskedLM(nn.Module):
    """The encoder and the MLM head at the gathered positions; the enhanced mask decoder
    between them when model.enhanced_mask_decoder."""
    cfg: ml_collections.ConfigDict

    def setup(self):
        cfg = self.cfg
        self.dtype = jnp.dtype(cfg.dtype)
        init = layers.truncated_normal(cfg.initializer_range)
        self.deberta = DebertaEncoder(cfg)
        if cfg.enhanced_mask_decoder:
            self.emd_position = layers.Embed(cfg.max_position_embeddings, cfg.hidden_size,
                                             ("position", "embed"), self.dtype, init)
        self.mlm_transform = layers.Dense(cfg.hidden_size, ("embed", "mlp"), dtype=self.dtype,
                                          kernel_init=init)
        self.mlm_norm = layers.LayerNorm(cfg.layer_norm_eps, self.dtype)
        self.mlm_bias = self.param("mlm_bias", nn.with_logical_partitioning(
            nn.initializers.zeros, ("vocab",)), (cfg.vocab_size,), jnp.float32)
        self.output = layers.output_layer(cfg, self.dtype, init)

    def encode(self, batch, deterministic):
        x, previous, rel, index, bias = self.deberta(
            batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], deterministic)
        if not self.cfg.enhanced_mask_decoder:
            return x
        # EMD (microsoft/DeBERTa's EnhancedMaskDecoder): queries = second-to-last output +
        # absolute positions, through the last layer twice, keys/values the same output.
        last = self.deberta.layers[-1]
        query = previous + self.emd_position(jnp.arange(x.shape[1]))[None]
        for _ in range(2):
            query = last(previous, rel, index, bias, deterministic, query_states=query)
        return query

    def mlm_logits(self, x, positions):
        axes = ("batch", "pred", "embed")
        picked = layers.constrain(jnp.take_along_axis(x, positions[..., None], axis=1), axes)
        h = layers.activation(self.cfg.hidden_act)(self.mlm_transform(picked))
        h = layers.constrain(self.mlm_norm(layers.constrain(h, axes)), axes)
        logits = (layers.vocab_logits(self.deberta.token_embed, self.output, h)
                  + self.mlm_bias.astype(self.dtype))
        return layers.constrain(logits, ("batch", "pred", "vocab")).astype(jnp.float32)

    def __call__(self, batch, deterministic: bool = True):
        return {"mlm_logits": self.mlm_logits(self.encode(batch, deterministic),
                                              batch["masked_lm_positions"])}


def outputs(cfg, params, batch) -> dict:
    """The last layer's states and the MLM logits at every position (through the
    enhanced mask decoder where the model has one), for pretrainx.load."""
    def run(net, batch):
        x = net.deberta(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
                        True)[0]
        decoded = net.encode(batch, True) if net.cfg.enhanced_mask_decoder else x
        return {"hidden_states": x, "logits": net.mlm_logits(decoded, layers.every_position(x))}
    return DebertaForMaskedLM(cfg).apply({"params": params}, batch, method=run)


class DebertaForFineTuning(heads.TaskModel):
    """The encoder under BERT's task heads (the HF ContextPooler's place is our pooler:
    dense + GeLU on [CLS], DeBERTa's pooler_hidden_act)."""

    @nn.compact
    def __call__(self, batch, deterministic: bool = True):
        cfg = self.cfg
        x = DebertaEncoder(cfg, name="deberta")(batch["input_ids"], batch["token_type_ids"],
                                                batch["attention_mask"], deterministic)[0]
        return heads.task_logits(
            x, batch["attention_mask"], head=self.head, num_labels=self.num_labels,
            deterministic=deterministic, dtype=jnp.dtype(cfg.dtype),
            init=layers.truncated_normal(cfg.initializer_range), dropout_rate=cfg.dropout_rate,
            pooler_width=cfg.hidden_size, pooler_activation=cfg.hidden_act,
            dropout_before_pooler=True)


def finetune_model(cfg, head: str, num_labels: int, peft):
    """Full fine-tuning only: the family has no PEFT (fine-tuning refuses a method first)."""
    del peft
    return DebertaForFineTuning(cfg, head, num_labels)
