"""The Transformer encoder of BERT (Devlin et al. 2019) and the families built on it
(RoBERTa, SpanBERT, ALBERT, ELECTRA, DistilBERT, DeBERTa's keys): embeddings, the
layer block, the masked-LM head at the gathered positions, the pooler and NSP head,
and the fine-tuning model. A family's `default_config` gives the values
(families/bert/model.py: BERT-Base's; the others start from it).

Post-LN by default, learned positions, token-type embeddings, a tanh pooler on [CLS],
and an MLM head computed only at the `max_predictions_per_seq` gathered positions (as
google-research/bert's run_pretraining.py does): the vocabulary projection is most of
a small model's cost, and 85% of it is wasted on positions with no label.

ALBERT (Lan et al. 2020) sets two keys: model.embedding_size = E (0 or hidden_size: no
factorisation) makes the word, position and type embeddings and their LayerNorm E-wide,
projects E -> hidden_size ("embedding_projection") before the first layer, and makes
the MLM head's transform hidden_size -> E so that it decodes through the tied E-wide
table; model.share_layers = True applies one layer's parameters num_layers times.

Four keys change the architecture one at a time, for comparisons of modifications at
equal compute (Narang et al. 2021; python -m pretrainx.compare): model.norm (layernorm
| rmsnorm, Zhang & Sennrich 2019), model.norm_position (post | pre: the Megatron-BERT
block, Shoeybi et al. 2019 and Xiong et al. 2020: each sub-layer reads a normed input,
no embedding norm, one norm after the last layer), model.position_embedding (learned |
rotary, Su et al. 2021 | relative, T5's buckets shared by the layers) and model.glu
(act(x W) * (x V) in place of act(x W), Shazeer 2020, act = model.hidden_act: gelu for
GeGLU, silu for SwiGLU). An HF BERT holds only the defaults.
"""

import jax.numpy as jnp
import ml_collections
from flax import linen as nn

from pretrainx.models import heads, layers, mha
from pretrainx.models import peft as peft_lib
from pretrainx.models.gated import GatedMlp
from pretrainx.models.relative import RelativePositionBias


# BERT's architecture where a comparison may change it (the module docstring)
MODIFICATIONS = {"norm": "layernorm", "norm_position": "post",
                 "position_embedding": "learned", "glu": False}


def embedding_size(cfg) -> int:
    """E: the width of the embedding tables (hidden_size unless factorised)."""
    return cfg.embedding_size or cfg.hidden_size


def factorised(cfg) -> bool:
    return embedding_size(cfg) != cfg.hidden_size


def architecture(cfg, key: str):
    """An architecture modification's value; BERT's where `cfg` predates the key (a
    fine-tuned model's stored config)."""
    return cfg.get(key, MODIFICATIONS[key])


def modified(cfg) -> list:
    """The architecture keys `cfg` sets away from BERT's (what an HF BERT cannot hold)."""
    return [f"model.{k}={architecture(cfg, k)!r}" for k, v in MODIFICATIONS.items()
            if architecture(cfg, k) != v]


def norm_layer(cfg, dtype, name=None) -> nn.Module:
    """The model's norm: BERT's LayerNorm or (model.norm = rmsnorm) T5's RMSNorm."""
    if architecture(cfg, "norm") == "rmsnorm":
        return layers.RMSNorm(cfg.layer_norm_eps, dtype, name=name)
    return layers.LayerNorm(cfg.layer_norm_eps, dtype, name=name)


def pre_norm(cfg) -> bool:
    return architecture(cfg, "norm_position") == "pre"


class EncoderLayer(nn.Module):
    cfg: ml_collections.ConfigDict
    dtype: jnp.dtype
    peft: peft_lib.Peft = peft_lib.Peft()

    @nn.compact
    def __call__(self, x, attn_bias, positions, deterministic):
        cfg, tuning = self.cfg, self.peft
        init = layers.truncated_normal(cfg.initializer_range)
        pre = pre_norm(cfg)
        rotary = (mha.Rotary(cfg.rope_theta)
                  if architecture(cfg, "position_embedding") == "rotary" else None)
        h = norm_layer(cfg, self.dtype, "attention_norm")(x) if pre else x
        attn = mha.MultiHeadAttention(
            num_heads=cfg.num_heads, head_dim=cfg.hidden_size // cfg.num_heads,
            dropout_rate=cfg.attention_dropout_rate, dtype=self.dtype, kernel_init=init,
            float32_logits=cfg.float32_attention_logits, tuning=tuning,
            impl=cfg.attention_impl, rotary=rotary,
            name="attention")(h, h, attn_bias, deterministic, positions)
        if tuning.adapter_size:  # Houlsby: after each sub-layer's projection, before the residual
            attn = peft_lib.Adapter(tuning.adapter_size, self.dtype, name="attention_adapter")(attn)
        attn = layers.Dropout(cfg.dropout_rate)(attn, deterministic=deterministic)
        x = x + attn if pre else norm_layer(cfg, self.dtype, "attention_norm")(x + attn)
        x = layers.constrain(x, ("batch", "length", "embed"))
        h = norm_layer(cfg, self.dtype, "mlp_norm")(x) if pre else x
        if architecture(cfg, "glu"):
            h = GatedMlp(cfg.mlp_dim, cfg.hidden_act, 0.0, self.dtype, init, init,
                         name="mlp")(h, deterministic)
        else:
            h = layers.Mlp(cfg.mlp_dim, cfg.hidden_act, self.dtype, init, lora=tuning.lora,
                           lora_targets=tuning.lora_targets, name="mlp")(h, deterministic)
        if tuning.adapter_size:
            h = peft_lib.Adapter(tuning.adapter_size, self.dtype, name="mlp_adapter")(h)
        h = layers.Dropout(cfg.dropout_rate)(h, deterministic=deterministic)
        x = x + h if pre else norm_layer(cfg, self.dtype, "mlp_norm")(x + h)
        x = layers.constrain(x, ("batch", "length", "embed"))
        self.sow("intermediates", "hidden", x)  # read by distillation; free otherwise
        return x


class Encoder(nn.Module):
    """Embeddings + the layer stack; returns the sequence output [batch, length, embed]."""
    cfg: ml_collections.ConfigDict
    peft: peft_lib.Peft = peft_lib.Peft()

    def setup(self):
        cfg = self.cfg
        self.dtype = jnp.dtype(cfg.dtype)
        init = layers.truncated_normal(cfg.initializer_range)
        width = embedding_size(cfg)
        self.token_embed = layers.Embed(cfg.vocab_size, width, ("vocab", "embed"),
                                        self.dtype, init)
        self.positions = architecture(cfg, "position_embedding")
        if self.positions == "learned":
            self.position_embed = layers.Embed(cfg.max_position_embeddings, width,
                                               ("position", "embed"), self.dtype, init)
        elif self.positions == "relative":  # T5's: one table the layers share
            self.relative_bias = RelativePositionBias(32, 128, cfg.num_heads, True, self.dtype)
        if cfg.type_vocab_size:  # DistilBERT has none
            self.type_embed = layers.Embed(cfg.type_vocab_size, width,
                                           ("type_vocab", "embed"), self.dtype, init)
        if not pre_norm(cfg):  # pre-norm: the first layer norms its input itself
            self.embed_norm = norm_layer(cfg, self.dtype)
        else:
            self.final_norm = norm_layer(cfg, self.dtype)
        self.embed_dropout = layers.Dropout(cfg.dropout_rate)
        if factorised(cfg):  # ALBERT: E-wide embeddings, one E -> hidden projection
            # The E side of the kernel stays whole (None): "embed" names its other side.
            self.embedding_projection = layers.Dense(cfg.hidden_size, (None, "embed"),
                                                     dtype=self.dtype, kernel_init=init)
        self.layers = layers.layer_stack(EncoderLayer, cfg, self.dtype, cfg.num_layers, "layer",
                                         static_argnums=(4,),
                                         shared=cfg.share_layers, peft=self.peft)
        if self.peft.prompt_length:
            self.prompt = self.param("prompt", nn.with_logical_partitioning(
                init, ("prefix", "embed")), (self.peft.prompt_length, width),
                jnp.float32)

    def __call__(self, input_ids, token_type_ids, attention_mask, deterministic,
                 positions=None):
        """positions (optional, [batch, length]): per token, restarting in each packed
        example; by default 0, 1, ... along the row."""
        x = self.token_embed(input_ids)
        prompt = self.peft.prompt_length
        if prompt:  # prompt-tuning (Lester et al. 2021): learned vectors before the text
            batch = input_ids.shape[0]
            x = jnp.concatenate([jnp.broadcast_to(self.prompt.astype(x.dtype)[None],
                                                  (batch,) + self.prompt.shape), x], axis=1)
            pad = lambda t, v: jnp.concatenate([jnp.full((batch, prompt), v, t.dtype), t], 1)
            token_type_ids = pad(token_type_ids, 0)
            attention_mask = pad(attention_mask, 1)
        length = x.shape[1]
        # RoBERTa (fairseq, HF) numbers positions from padding_idx + 1 = 2: rows 0 and 1
        # of its 514-row table are never used by a real token.
        offset = self.cfg.position_offset
        if positions is None or prompt:
            positions = jnp.broadcast_to(jnp.arange(length), x.shape[:2])
        if self.positions == "learned":
            x = x + self.position_embed(positions + offset)
        # A one-row type table (RoBERTa) reads every segment as type 0, as HF's RoBERTa
        # tokenizer writes them; a lookup past the table would be NaN, not an error.
        if self.cfg.type_vocab_size:
            x = x + self.type_embed(jnp.minimum(token_type_ids, self.cfg.type_vocab_size - 1))
        if not pre_norm(self.cfg):
            x = self.embed_norm(x)
        x = self.embed_dropout(x, deterministic=deterministic)
        x = layers.constrain(x, ("batch", "length", "embed"))
        if factorised(self.cfg):
            x = layers.constrain(self.embedding_projection(x), ("batch", "length", "embed"))
        self.sow("intermediates", "embedded", x)  # read by distillation; free otherwise
        # attention_mask doubles as segment ids (1 real, 0 pad); packed inputs pass
        # true segment ids and get block-diagonal attention for free.
        mask = layers.Mask(attention_mask, attention_mask, extra=(
            self.relative_bias(length, length) if self.positions == "relative" else None))
        x = layers.apply_stack(self.layers, x, mask, positions, deterministic)
        if pre_norm(self.cfg):
            x = layers.constrain(self.final_norm(x), ("batch", "length", "embed"))
        return x[:, prompt:] if prompt else x


class EncoderForMaskedLM(nn.Module):
    """The encoder and the masked LM head, at the gathered positions (RoBERTa, SpanBERT)."""
    cfg: ml_collections.ConfigDict

    def setup(self):
        cfg = self.cfg
        self.dtype = jnp.dtype(cfg.dtype)
        init = layers.truncated_normal(cfg.initializer_range)
        self.bert = Encoder(cfg)
        # hidden -> E: the tied decoder is E-wide when the embeddings are factorised
        self.mlm_transform = layers.Dense(embedding_size(cfg), ("embed", "mlp"),
                                          dtype=self.dtype, kernel_init=init)
        self.mlm_norm = layers.LayerNorm(cfg.layer_norm_eps, self.dtype)
        self.mlm_bias = self.param("mlm_bias", nn.with_logical_partitioning(
            nn.initializers.zeros, ("vocab",)), (cfg.vocab_size,), jnp.float32)
        self.output = layers.output_layer(cfg, self.dtype, init)

    def encode(self, batch, deterministic):
        return self.bert(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
                         deterministic, batch.get("positions"))

    def decode(self, h):
        """[batch, pred, embed] -> vocabulary logits (through the word table when tied)."""
        logits = (layers.vocab_logits(self.bert.token_embed, self.output, h)
                  + self.mlm_bias.astype(self.dtype))
        return layers.constrain(logits, ("batch", "pred", "vocab")).astype(jnp.float32)

    def mlm_logits(self, x, positions):
        # Every head activation is constrained explicitly: left to propagation, XLA's
        # partitioner computed wrong gradients for the tied projection on a
        # (data, fsdp, tensor) = (2, 2, 2) CPU mesh (jax 0.10.2).
        picked = jnp.take_along_axis(x, positions[..., None], axis=1)
        picked = layers.constrain(picked, ("batch", "pred", "embed"))
        h = layers.activation(self.cfg.hidden_act)(self.mlm_transform(picked))
        h = layers.constrain(h, ("batch", "pred", "embed"))
        h = layers.constrain(self.mlm_norm(h), ("batch", "pred", "embed"))
        return self.decode(h)

    def __call__(self, batch, deterministic: bool = True):
        x = self.encode(batch, deterministic)
        return {"mlm_logits": self.mlm_logits(x, batch["masked_lm_positions"])}


class EncoderForPreTraining(EncoderForMaskedLM):
    """Masked LM logits at the gathered positions and next-sentence logits."""

    def setup(self):
        super().setup()
        cfg = self.cfg
        init = layers.truncated_normal(cfg.initializer_range)
        self.pooler = layers.Dense(cfg.hidden_size, ("embed", "mlp"), dtype=self.dtype,
                                   kernel_init=init)
        self.nsp = layers.Dense(2, ("mlp", "classes"), dtype=self.dtype, kernel_init=init)

    def __call__(self, batch, deterministic: bool = True):
        x = self.encode(batch, deterministic)
        if "next_sentence_positions" in batch:  # packed pairs: each example's [CLS]
            first = jnp.take_along_axis(x, batch["next_sentence_positions"][..., None], axis=1)
            axes = ("batch", "pred", "embed")
        else:
            first, axes = x[:, 0], ("batch", "embed")
        pooled = jnp.tanh(self.pooler(first))
        pooled = layers.constrain(pooled, axes)
        nsp_logits = self.nsp(pooled).astype(jnp.float32)
        return {"mlm_logits": self.mlm_logits(x, batch["masked_lm_positions"]),
                "nsp_logits": nsp_logits}


class EncoderForFineTuning(heads.TaskModel):
    """The pretrained encoder (and pooler) under a task head, as run_classifier.py,
    run_squad.py and HF's BertFor* heads put them:

    classify: dropout(tanh pooler([CLS])) -> num_labels logits (1 for regression);
    tokens: dropout(sequence) -> num_labels logits per token (NER);
    span: sequence -> start and end logits per token (extractive QA).
    """
    peft: peft_lib.Peft = peft_lib.Peft()

    @nn.compact
    def __call__(self, batch, deterministic: bool = True):
        cfg = self.cfg
        x = Encoder(cfg, self.peft, name="bert")(
            batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], deterministic)
        # the pooler: tanh (BERT); DistilBERT's pre_classifier: relu
        return heads.task_logits(
            x, batch["attention_mask"], head=self.head, num_labels=self.num_labels,
            deterministic=deterministic, dtype=jnp.dtype(cfg.dtype),
            init=layers.truncated_normal(cfg.initializer_range), dropout_rate=cfg.dropout_rate,
            pooler_width=cfg.hidden_size,
            pooler_activation=cfg.pooler_activation)


def flops_per_token(cfg: ml_collections.ConfigDict, seq_len: int, max_predictions: int) -> float:
    """Training FLOPs per input token (forward x 3), the numerator of MFU.

    Per layer and token: 4 projections of h x h and two of h x mlp (2 FLOPs a
    multiply-add), plus scores and the weighted sum (2 x 2 x seq_len x h). The MLM
    head runs on `max_predictions` rows per sequence (transform h x h + decoder
    h x vocab); pooler and NSP head once per sequence. Embedding lookups are free.
    Factorised (ALBERT): the E -> h projection per token, a transform h x E and an
    E x vocab decoder. Shared layers cost what unshared ones do; a gated feed-forward
    (model.glu) has three h x mlp projections.
    """
    h, mlp, n, e = cfg.hidden_size, cfg.mlp_dim, cfg.num_layers, embedding_size(cfg)
    projections = 3 if architecture(cfg, "glu") else 2
    per_layer = 2 * (4 * h * h + projections * h * mlp) + 2 * 2 * seq_len * h
    head_per_seq = max_predictions * 2 * (h * e + e * cfg.vocab_size) + 2 * (h * h + 2 * h)
    projection = 2 * e * h if e != h else 0
    forward = n * per_layer + projection + head_per_seq / seq_len
    return 3.0 * forward


def outputs(cfg, params, batch) -> dict:
    """The last layer's states and the MLM head's logits at every position of a padded
    batch (input_ids, token_type_ids, attention_mask), for pretrainx.load: a checkpoint
    with an MLM head (pretrain or mlm) of BERT's modules."""
    return heads.mlm_outputs(EncoderForMaskedLM(cfg), params, batch)


def fill_mask_model(cfg, head: str) -> nn.Module:
    """The pretraining model of a checkpoint with the `pretrain` (MLM and NSP) or `mlm`
    head, for filling in [MASK]."""
    return (EncoderForPreTraining if head == "pretrain" else EncoderForMaskedLM)(cfg)


def finetune_model(cfg, head: str, num_labels: int, peft) -> EncoderForFineTuning:
    """What the encoder families (BERT, RoBERTa, SpanBERT, ALBERT, ELECTRA) fine-tune."""
    return EncoderForFineTuning(cfg, head, num_labels, peft)
