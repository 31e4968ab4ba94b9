"""T5 encoder-decoder as the T5 paper, Mesh TensorFlow and T5X define it.

Pre-norm blocks with RMS LayerNorm, no biases, relative position buckets (one
table per stack, computed once and shared by its layers), cross-attention in the
decoder. Two published variants:

* T5 1.0: ReLU feed-forward, output layer tied to the token embeddings and scaled
  by d_model^-0.5.
* T5 1.1: gated-GELU feed-forward, separate output layer, no pretraining dropout.

Packed rows carry `*_segment_ids` (0 = padding): attention never crosses a
segment, and because segments are contiguous the relative distance between two
tokens of a segment is the same as if the segment stood alone.
"""

import jax.numpy as jnp
import ml_collections
from flax import linen as nn

from pretrainx.models import decoding, layers, mha
from pretrainx.models.relative import RelativePositionBias


def default_config() -> ml_collections.ConfigDict:
    """T5 1.0 Base's model keys (Raffel et al. 2020); T5 1.1 sets feed_forward and
    tie_output (configs/t5.py)."""
    m = ml_collections.ConfigDict()
    m.family = "t5"
    m.num_layers = 12  # encoder layers
    m.num_decoder_layers = 12
    m.hidden_size = 768  # d_model
    m.num_heads = 12
    m.head_dim = 64  # d_kv
    m.mlp_dim = 3072  # d_ff
    m.vocab_size = 32128  # 32000 pieces + 100 sentinels, padded to a multiple of 128
    m.feed_forward = "relu"  # relu (T5 1.0) | gated-gelu (T5 1.1) | gated-silu (UL2 20B)
    m.tie_output = True  # T5 1.0 ties; 1.1 has a separate output layer
    m.dropout_rate = 0.1
    m.layer_norm_eps = 1e-6
    m.relative_attention_num_buckets = 32
    m.relative_attention_max_distance = 128
    m.update(layers.compute_keys())
    return m


# model.feed_forward: the activation of wi (relu) or of the gate wi_0 (gated-*)
FEED_FORWARD = {"relu": "relu", "gated-gelu": "gelu_tanh", "gated-silu": "silu"}


def is_gated(cfg) -> bool:
    return cfg.feed_forward.startswith("gated-")


def normal(stddev: float):
    return nn.initializers.normal(stddev)


class FeedForward(nn.Module):
    """wi -> ReLU -> dropout -> wo without biases (T5); with model.feed_forward
    "gated-gelu" (T5.1.1) GELU(wi_0 x) * wi_1 x in place of ReLU(wi x), "gated-silu"
    (UL2 20B) SiLU(wi_0 x) * wi_1 x."""
    cfg: ml_collections.ConfigDict
    dtype: jnp.dtype

    @nn.compact
    def __call__(self, x, deterministic):
        cfg = self.cfg
        d_model = x.shape[-1]
        wi_init, wo_init = normal(d_model ** -0.5), normal(cfg.mlp_dim ** -0.5)
        dense = lambda name, init, feats, axes: layers.Dense(  # noqa: E731
            feats, axes, use_bias=False, dtype=self.dtype, kernel_init=init, name=name)
        act = layers.activation(FEED_FORWARD[cfg.feed_forward])
        if is_gated(cfg):
            gate = act(dense("wi_0", wi_init, cfg.mlp_dim, ("embed", "mlp"))(x))
            h = gate * dense("wi_1", wi_init, cfg.mlp_dim, ("embed", "mlp"))(x)
        else:
            h = act(dense("wi", wi_init, cfg.mlp_dim, ("embed", "mlp"))(x))
        h = layers.constrain(h, ("batch", "length", "mlp"))
        h = layers.Dropout(cfg.dropout_rate)(h, deterministic=deterministic)
        return dense("wo", wo_init, d_model, ("mlp", "embed"))(h)


def _attention(cfg, dtype, name):
    d_model, head_dim = cfg.hidden_size, cfg.head_dim
    inner = cfg.num_heads * head_dim
    return mha.MultiHeadAttention(
        num_heads=cfg.num_heads, head_dim=head_dim, dropout_rate=cfg.dropout_rate,
        use_bias=False, dtype=dtype, scale_queries=False,
        float32_logits=cfg.float32_attention_logits,
        kernel_init=normal(d_model ** -0.5), query_init=normal((d_model * head_dim) ** -0.5),
        out_init=normal(inner ** -0.5), impl=cfg.attention_impl, name=name)


class EncoderLayer(nn.Module):
    """Pre-norm: x += dropout(self-attention(norm(x))) with the shared relative position
    bias, then x += dropout(mlp(norm(x)))."""
    cfg: ml_collections.ConfigDict
    dtype: jnp.dtype

    @nn.compact
    def __call__(self, x, bias, deterministic):
        cfg = self.cfg
        norm = lambda name: layers.RMSNorm(cfg.layer_norm_eps, self.dtype, name=name)  # noqa: E731
        drop = lambda y: layers.Dropout(cfg.dropout_rate)(y, deterministic=deterministic)  # noqa
        y = norm("attention_norm")(x)
        x = x + drop(_attention(cfg, self.dtype, "attention")(y, y, bias, deterministic))
        x = layers.constrain(x, ("batch", "length", "embed"))
        y = norm("mlp_norm")(x)
        x = x + drop(FeedForward(cfg, self.dtype, name="mlp")(y, deterministic))
        return layers.constrain(x, ("batch", "length", "embed"))


class DecoderLayer(nn.Module):
    cfg: ml_collections.ConfigDict
    dtype: jnp.dtype

    @nn.compact
    def __call__(self, x, encoded, self_bias, cross_bias, deterministic):
        cfg = self.cfg
        norm = lambda name: layers.RMSNorm(cfg.layer_norm_eps, self.dtype, name=name)  # noqa: E731
        drop = lambda y: layers.Dropout(cfg.dropout_rate)(y, deterministic=deterministic)  # noqa
        y = norm("self_attention_norm")(x)
        x = x + drop(_attention(cfg, self.dtype, "self_attention")(y, y, self_bias, deterministic))
        x = layers.constrain(x, ("batch", "length", "embed"))
        y = norm("cross_attention_norm")(x)
        x = x + drop(_attention(cfg, self.dtype, "cross_attention")(y, encoded, cross_bias,
                                                                    deterministic))
        x = layers.constrain(x, ("batch", "length", "embed"))
        y = norm("mlp_norm")(x)
        x = x + drop(FeedForward(cfg, self.dtype, name="mlp")(y, deterministic))
        return layers.constrain(x, ("batch", "length", "embed"))


class T5(nn.Module):
    """(batch of packed inputs/targets) -> decoder logits [batch, targets_length, vocab]."""
    cfg: ml_collections.ConfigDict

    def setup(self):
        cfg = self.cfg
        self.dtype = jnp.dtype(cfg.dtype)
        self.token_embed = layers.Embed(cfg.vocab_size, cfg.hidden_size, ("vocab", "embed"),
                                        self.dtype, normal(1.0))
        bias = lambda bidirectional, name: RelativePositionBias(  # noqa: E731
            cfg.relative_attention_num_buckets, cfg.relative_attention_max_distance,
            cfg.num_heads, bidirectional, self.dtype, name=name)
        self.encoder_relpos = bias(True, "encoder_relpos")
        self.decoder_relpos = bias(False, "decoder_relpos")
        self.encoder_layers = layers.layer_stack(EncoderLayer, cfg, self.dtype, cfg.num_layers,
                                                 "encoder", static_argnums=(3,))
        self.decoder_layers = layers.layer_stack(DecoderLayer, cfg, self.dtype,
                                                 cfg.num_decoder_layers, "decoder",
                                                 static_argnums=(5,))
        self.encoder_norm = layers.RMSNorm(cfg.layer_norm_eps, self.dtype)
        self.decoder_norm = layers.RMSNorm(cfg.layer_norm_eps, self.dtype)
        self.dropout = layers.Dropout(cfg.dropout_rate)
        if not cfg.tie_output:
            self.output = layers.Dense(cfg.vocab_size, ("embed", "vocab"), use_bias=False,
                                       dtype=self.dtype,
                                       kernel_init=normal(cfg.hidden_size ** -0.5))

    def encode(self, tokens, segment_ids, deterministic):
        x = self.dropout(self.token_embed(tokens), deterministic)
        x = layers.constrain(x, ("batch", "length", "embed"))
        length = tokens.shape[1]
        bias = layers.Mask(segment_ids, segment_ids, extra=self.encoder_relpos(length, length))
        x = layers.apply_stack(self.encoder_layers, x, bias, deterministic)
        return self.dropout(self.encoder_norm(x), deterministic)

    def decode(self, encoded, encoder_segment_ids, decoder_input_tokens, decoder_segment_ids,
               deterministic):
        x = self.dropout(self.token_embed(decoder_input_tokens), deterministic)
        x = layers.constrain(x, ("batch", "length", "embed"))
        length = decoder_input_tokens.shape[1]
        self_bias = layers.Mask(decoder_segment_ids, decoder_segment_ids, causal=True,
                                extra=self.decoder_relpos(length, length))
        cross_bias = layers.Mask(decoder_segment_ids, encoder_segment_ids)
        x = layers.apply_stack(self.decoder_layers, x, encoded, self_bias, cross_bias,
                               deterministic)
        x = self.dropout(self.decoder_norm(x), deterministic)
        if self.cfg.tie_output:
            # Mesh TF rescales the tied projection so logits keep unit scale.
            logits = self.token_embed.attend(x * jnp.asarray(self.cfg.hidden_size ** -0.5,
                                                             self.dtype))
        else:
            logits = self.output(x)
        return layers.constrain(logits, ("batch", "length", "vocab"))

    def __call__(self, batch, deterministic: bool = True):
        encoded = self.encode(batch["encoder_input_tokens"], batch["encoder_segment_ids"],
                              deterministic)
        logits = self.decode(encoded, batch["encoder_segment_ids"],
                             batch["decoder_input_tokens"], batch["decoder_segment_ids"],
                             deterministic)
        return {"logits": logits.astype(jnp.float32)}


def outputs(cfg, params, batch) -> dict:
    """For pretrainx.load: the encoder's last states (after its final norm) and the
    decoder's vocabulary logits as it reads the same rows shifted right from the start
    token (pad, 0): what T5ForConditionalGeneration computes with labels=input_ids."""
    ids, mask = batch["input_ids"], batch["attention_mask"]
    shifted = jnp.concatenate([jnp.zeros_like(ids[:, :1]), ids[:, :-1]], axis=1)

    def run(net):
        encoded = net.encode(ids, mask, True)
        logits = net.decode(encoded, mask, shifted, mask, True)
        return {"hidden_states": encoded, "logits": logits.astype(jnp.float32)}
    return T5(cfg).apply({"params": params}, method=run)


def flops_per_example(cfg: ml_collections.ConfigDict, inputs_length: int,
                      targets_length: int) -> float:
    """Training FLOPs of one packed row (forward x 3), 2 FLOPs a multiply-add.

    Encoder token: 4 projections d x inner, the feed-forward (2 or 3 matrices
    d x mlp), scores + weighted sum over the inputs. Decoder token: self-attention
    as above over the targets, cross-attention's q/o on the decoder token and its
    k/v once per encoder token, scores over the inputs, the feed-forward, and the
    d x vocab output layer.
    """
    d, mlp, v = cfg.hidden_size, cfg.mlp_dim, cfg.vocab_size
    inner = cfg.num_heads * cfg.head_dim
    ff = (3 if is_gated(cfg) else 2) * d * mlp
    enc = cfg.num_layers * inputs_length * (4 * d * inner + ff + 2 * inputs_length * inner)
    dec_self = 4 * d * inner + 2 * targets_length * inner
    dec_cross = 2 * d * inner + 2 * inputs_length * inner
    dec = cfg.num_decoder_layers * (targets_length * (dec_self + dec_cross + ff)
                                    + inputs_length * 2 * d * inner)
    return 3.0 * 2.0 * (enc + dec + targets_length * d * v)


def generate(cfg, params, tokens, segment_ids, length: int, eos_id: int, pad_id: int,
             num_beams: int = 1):
    """[batch, length] greedy outputs from id 0, the decoder rerun on the prefix (no cache:
    fine-tuning targets are a few tokens); rows go on past EOS (callers cut there)."""
    del eos_id, pad_id
    if num_beams != 1:
        raise ValueError("T5 decodes greedily here (num_beams=1)")
    return decoding.encoder_decoder(T5(cfg), params, tokens, segment_ids, length)
