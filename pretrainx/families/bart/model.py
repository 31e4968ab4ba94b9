"""BART as released (Lewis et al. 2020; fairseq's bart.base / bart.large, HF's
BartForConditionalGeneration): a post-LN encoder-decoder.

Token embeddings shared by encoder, decoder and the output layer (plus a zero-initialised
`final_logits_bias`), learned positions numbered from 2 (fairseq's padding_idx + 1; HF's
offset of 2), a LayerNorm on the embeddings of each stack, post-LN blocks with biases
and exact GELU, queries scaled by head_dim^-0.5. Packed rows carry `*_segment_ids`
(0 = padding) and `*_positions` restarting at each segment: no attention crosses a
segment in the encoder, the decoder or between them.
"""

import jax.numpy as jnp
import ml_collections
from flax import linen as nn

from pretrainx.models import decoding, layers, mha

POSITION_OFFSET = 2


def default_config() -> ml_collections.ConfigDict:
    """bart.base's model keys: 6 + 6 layers, d_model 768, 12 heads, FFN 3072, GPT-2's
    byte-level BPE in fairseq's layout (50,265 ids), 1,024 positions."""
    m = ml_collections.ConfigDict()
    m.family = "bart"
    m.num_layers = 6  # encoder layers
    m.num_decoder_layers = 6
    m.hidden_size = 768
    m.num_heads = 12
    m.mlp_dim = 3072
    m.vocab_size = 50265
    m.max_position_embeddings = 1024
    m.dropout_rate = 0.1
    m.attention_dropout_rate = 0.1
    m.activation_dropout_rate = 0.1
    m.layer_norm_eps = 1e-5
    m.initializer_range = 0.02
    m.hidden_act = "gelu"
    m.update(layers.compute_keys())
    m.decoder_start_id = 2  # </s> in fairseq's layout: the decoder's first input
    return m


def _attention(cfg, dtype, name, decode=False, static_kv=False):
    return mha.MultiHeadAttention(
        num_heads=cfg.num_heads, head_dim=cfg.hidden_size // cfg.num_heads,
        dropout_rate=cfg.attention_dropout_rate, dtype=dtype,
        kernel_init=nn.initializers.normal(cfg.initializer_range),
        float32_logits=cfg.float32_attention_logits, impl=cfg.attention_impl,
        decoding=mha.Decoding(static_kv) if decode else None, name=name)


class FeedForward(nn.Module):
    """fc1 -> GELU -> dropout (fairseq's activation_dropout) -> fc2."""
    cfg: ml_collections.ConfigDict
    dtype: jnp.dtype

    @nn.compact
    def __call__(self, x, deterministic):
        cfg = self.cfg
        init = nn.initializers.normal(cfg.initializer_range)
        h = layers.Dense(cfg.mlp_dim, ("embed", "mlp"), dtype=self.dtype, kernel_init=init,
                         name="wi")(x)
        h = layers.constrain(layers.activation(cfg.hidden_act)(h), ("batch", "length", "mlp"))
        h = layers.Dropout(cfg.activation_dropout_rate)(h, deterministic=deterministic)
        return layers.Dense(x.shape[-1], ("mlp", "embed"), dtype=self.dtype, kernel_init=init,
                            name="wo")(h)


class EncoderLayer(nn.Module):
    """Post-norm: x = norm(x + dropout(self-attention)), x = norm(x + dropout(mlp))."""
    cfg: ml_collections.ConfigDict
    dtype: jnp.dtype

    @nn.compact
    def __call__(self, x, bias, deterministic):
        cfg = self.cfg
        norm = lambda name: layers.LayerNorm(cfg.layer_norm_eps, self.dtype, name=name)  # noqa
        drop = lambda y: layers.Dropout(cfg.dropout_rate)(y, deterministic=deterministic)  # noqa
        y = _attention(cfg, self.dtype, "attention")(x, x, bias, deterministic)
        x = norm("attention_norm")(x + drop(y))
        x = layers.constrain(x, ("batch", "length", "embed"))
        x = norm("mlp_norm")(x + drop(FeedForward(cfg, self.dtype, name="mlp")(x, deterministic)))
        return layers.constrain(x, ("batch", "length", "embed"))


class DecoderLayer(nn.Module):
    cfg: ml_collections.ConfigDict
    dtype: jnp.dtype
    decode: bool = False  # one token a call, keys and values in the "cache" collection

    @nn.compact
    def __call__(self, x, encoded, self_bias, cross_bias, deterministic):
        cfg = self.cfg
        norm = lambda name: layers.LayerNorm(cfg.layer_norm_eps, self.dtype, name=name)  # noqa
        drop = lambda y: layers.Dropout(cfg.dropout_rate)(y, deterministic=deterministic)  # noqa
        y = _attention(cfg, self.dtype, "self_attention", self.decode)(
            x, x, self_bias, deterministic)
        x = norm("self_attention_norm")(x + drop(y))
        x = layers.constrain(x, ("batch", "length", "embed"))
        y = _attention(cfg, self.dtype, "cross_attention", self.decode, static_kv=True)(
            x, encoded, cross_bias, deterministic)
        x = norm("cross_attention_norm")(x + drop(y))
        x = layers.constrain(x, ("batch", "length", "embed"))
        x = norm("mlp_norm")(x + drop(FeedForward(cfg, self.dtype, name="mlp")(x, deterministic)))
        return layers.constrain(x, ("batch", "length", "embed"))


def _counting(tokens):
    """Positions 0, 1, ... of unpacked rows."""
    return jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)


def _positions(batch, name, tokens):
    """A batch's `name` positions (restarting at each packed segment), or 0, 1, ..."""
    return batch[name] if name in batch else _counting(tokens)


class Bart(nn.Module):
    """(batch of inputs/targets) -> decoder logits [batch, targets_length, vocab].

    With `use_cache=True`, `decode` takes one token per row and keeps the decoder's keys and
    values (and the encoder's, projected once) in the "cache" collection; a call with the
    full target length creates it (see `generate`)."""
    cfg: ml_collections.ConfigDict
    use_cache: bool = False

    def setup(self):
        cfg = self.cfg
        self.dtype = jnp.dtype(cfg.dtype)
        init = nn.initializers.normal(cfg.initializer_range)
        self.token_embed = layers.Embed(cfg.vocab_size, cfg.hidden_size, ("vocab", "embed"),
                                        self.dtype, init)
        position = lambda name: layers.Embed(  # noqa: E731
            cfg.max_position_embeddings + POSITION_OFFSET, cfg.hidden_size,
            ("position", "embed"), self.dtype, init, name=name)
        self.encoder_position_embed = position("encoder_position_embed")
        self.decoder_position_embed = position("decoder_position_embed")
        self.encoder_embed_norm = layers.LayerNorm(cfg.layer_norm_eps, self.dtype)
        self.decoder_embed_norm = layers.LayerNorm(cfg.layer_norm_eps, self.dtype)
        self.encoder_layers = layers.layer_stack(EncoderLayer, cfg, self.dtype, cfg.num_layers,
                                                 "encoder", static_argnums=(3,))
        self.decoder_layers = layers.layer_stack(DecoderLayer, cfg, self.dtype,
                                                 cfg.num_decoder_layers, "decoder",
                                                 static_argnums=(5,), decode=self.use_cache)
        self.dropout = layers.Dropout(cfg.dropout_rate)
        self.final_logits_bias = self.param(
            "final_logits_bias", nn.with_logical_partitioning(nn.initializers.zeros, ("vocab",)),
            (cfg.vocab_size,), jnp.float32)

    def _embed(self, tokens, positions, position_embed, norm, deterministic):
        x = self.token_embed(tokens) + position_embed(positions + POSITION_OFFSET)
        x = self.dropout(norm(x), deterministic)
        return layers.constrain(x, ("batch", "length", "embed"))

    def encode(self, tokens, segment_ids, positions, deterministic):
        x = self._embed(tokens, positions, self.encoder_position_embed,
                        self.encoder_embed_norm, deterministic)
        return layers.apply_stack(self.encoder_layers, x, layers.Mask(segment_ids, segment_ids),
                                  deterministic)

    def decode(self, encoded, encoder_segment_ids, tokens, segment_ids, positions,
               deterministic, states_only: bool = False):
        """Logits [batch, length, vocab], or with states_only the last layer's states."""
        x = self._embed(tokens, positions, self.decoder_position_embed,
                        self.decoder_embed_norm, deterministic)
        self_bias = layers.Mask(segment_ids, segment_ids, causal=True)
        cross_bias = layers.Mask(segment_ids, encoder_segment_ids)
        x = layers.apply_stack(self.decoder_layers, x, encoded, self_bias, cross_bias,
                               deterministic)
        if states_only:
            return x
        logits = self.token_embed.attend(x) + self.final_logits_bias.astype(self.dtype)
        return layers.constrain(logits, ("batch", "length", "vocab"))

    def __call__(self, batch, deterministic: bool = True):
        inputs, targets = batch["encoder_input_tokens"], batch["decoder_input_tokens"]
        encoded = self.encode(inputs, batch["encoder_segment_ids"],
                              _positions(batch, "encoder_positions", inputs), deterministic)
        logits = self.decode(encoded, batch["encoder_segment_ids"], targets,
                             batch["decoder_segment_ids"],
                             _positions(batch, "decoder_positions", targets), deterministic)
        return {"logits": logits.astype(jnp.float32)}


class BartForFineTuning(Bart):
    """BART fine-tuned as the paper does (section 3). head "seq2seq": the decoder writes
    the target (text-to-text). head "classify": encoder and decoder both read the input,
    the decoder's shifted right from </s>, and the decoder's state at the input's final
    </s> (the last real token) goes through dense -> tanh -> classifier, HF's
    BartForSequenceClassification and its classification head (dropout 0 there, as HF's
    classifier_dropout default)."""
    head: str = "seq2seq"
    num_labels: int = 0

    def setup(self):
        super().setup()
        if self.head == "classify":
            init = nn.initializers.normal(self.cfg.initializer_range)
            self.pooler = layers.Dense(self.cfg.hidden_size, ("embed", "mlp"), dtype=self.dtype,
                                       kernel_init=init)
            self.classifier = layers.Dense(self.num_labels, ("mlp", "classes"),
                                           dtype=self.dtype, kernel_init=init)

    def __call__(self, batch, deterministic: bool = True):
        if self.head == "seq2seq":
            return super().__call__(batch, deterministic)
        if self.head != "classify":
            raise ValueError(f"BART fine-tunes with head classify or seq2seq, not {self.head}")
        ids, segments = batch["input_ids"], batch["attention_mask"]
        positions = _counting(ids)
        encoded = self.encode(ids, segments, positions, deterministic)
        start = jnp.full_like(ids[:, :1], self.cfg.decoder_start_id)
        shifted = jnp.concatenate([start, ids[:, :-1]], axis=1)
        x = self.decode(encoded, segments, shifted, segments, positions, deterministic,
                        states_only=True)
        last = jnp.sum(segments, axis=1) - 1
        x = jnp.take_along_axis(x, last[:, None, None], axis=1)[:, 0]
        h = jnp.tanh(self.pooler(x))
        return {"logits": self.classifier(h).astype(jnp.float32)}


def outputs(cfg, params, batch) -> dict:
    """For pretrainx.load: the encoder's last states (BartModel's
    encoder_last_hidden_state) and the decoder's vocabulary logits as it reads the same
    rows shifted right from decoder_start_id (</s>): what
    BartForConditionalGeneration computes with labels=input_ids."""
    ids, mask = batch["input_ids"], batch["attention_mask"]
    start = jnp.full_like(ids[:, :1], cfg.decoder_start_id)
    shifted = jnp.concatenate([start, ids[:, :-1]], axis=1)

    def run(net):
        positions = _counting(ids)
        encoded = net.encode(ids, mask, positions, True)
        logits = net.decode(encoded, mask, shifted, mask, positions, True)
        return {"hidden_states": encoded, "logits": logits.astype(jnp.float32)}
    return Bart(cfg).apply({"params": params}, method=run)


def finetune_model(cfg, head: str, num_labels: int, peft):
    """Full fine-tuning only: the family has no PEFT (fine-tuning refuses a method first)."""
    del peft
    return BartForFineTuning(cfg, head=head, num_labels=num_labels)


def generate(cfg, params, tokens, segment_ids, length: int, eos_id: int, pad_id: int,
             num_beams: int = 1, length_penalty: float = 1.0, early_stopping: bool = False,
             forced_eos: bool = True):
    """[batch, length] tokens BART writes for encoder inputs `tokens` [batch, n] (one
    example a row, segment ids 1 / 0 for padding), decoding from </s> as fairseq and
    HF's generate do (decoder_start_token_id = eos), greedily or by beam search, with a
    key-value cache: a step costs one token's work. `forced_eos` writes EOS at the last
    step (HF's forced_eos_token_id, in the config export writes)."""
    if cfg.scan_layers:
        raise ValueError("generation reads unrolled layers (model.scan_layers=False)")
    if length + 1 > cfg.max_position_embeddings:
        raise ValueError(f"length {length} exceeds the model's {cfg.max_position_embeddings} "
                         "decoder positions")
    model = Bart(cfg, use_cache=True)
    positions = _counting(tokens)
    encoded = model.apply({"params": params}, tokens, segment_ids, positions, True,
                          method="encode")
    encoded = jnp.repeat(encoded, num_beams, axis=0)
    segments = jnp.repeat(segment_ids, num_beams, axis=0)
    rows = encoded.shape[0]
    full = jnp.zeros((rows, length), jnp.int32)
    _, created = model.apply({"params": params}, encoded, segments, full, full + 1, full, True,
                             method="decode", mutable=["cache"])
    one = jnp.ones((rows, 1), jnp.int32)

    def step(cache, token, i):
        logits, changed = model.apply({"params": params, "cache": cache}, encoded, segments,
                                      token[:, None], one, one * i, True, method="decode",
                                      mutable=["cache"])
        return logits[:, -1], changed["cache"]

    start = jnp.full((rows,), cfg.decoder_start_id, jnp.int32)
    if num_beams == 1:
        return decoding.greedy(step, created["cache"], start, length, eos_id, pad_id,
                               forced_eos)
    return decoding.beam_search(step, created["cache"], start, num_beams, length, eos_id,
                                pad_id, length_penalty, early_stopping, forced_eos)[0]


def flops_per_example(cfg: ml_collections.ConfigDict, inputs_length: int,
                      targets_length: int) -> float:
    """Training FLOPs of one row (forward x 3), 2 FLOPs a multiply-add: T5's count
    with inner = d_model, a 2-matrix FFN and the tied d x vocab output."""
    d, mlp, v = cfg.hidden_size, cfg.mlp_dim, cfg.vocab_size
    ff = 2 * d * mlp
    enc = cfg.num_layers * inputs_length * (4 * d * d + ff + 2 * inputs_length * d)
    dec_self = 4 * d * d + 2 * targets_length * d
    dec_cross = 2 * d * d + 2 * inputs_length * d
    dec = cfg.num_decoder_layers * (targets_length * (dec_self + dec_cross + ff)
                                    + inputs_length * 2 * d * d)
    return 3.0 * 2.0 * (enc + dec + targets_length * d * v)
