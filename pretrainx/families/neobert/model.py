"""NeoBERT (Le Breton et al. 2025): BERT-Base's width at 28 layers, pre-RMSNorm, rotary
positions, SwiGLU feed-forward, no biases in the blocks and no position or token-type
tables; the MLM decoder is one linear layer (with a bias) of its own.

Built from the shared blocks (mha.Rotary, layers.RMSNorm, gated.GatedMlp with SiLU);
the authors' code (chandar-lab/NeoBERT) is the reference for what the paper leaves out:
the SwiGLU width is 2/3 of intermediate_size rounded up to a multiple of 8 (3,072 ->
2,048), RMSNorm eps 1e-5, rotary base 10,000, dropout 0."""

import jax.numpy as jnp
import ml_collections
from flax import linen as nn

from pretrainx.models import gated, heads, layers, mha


def default_config() -> ml_collections.ConfigDict:
    """The released NeoBERT's model keys."""
    m = ml_collections.ConfigDict()
    m.family = "neobert"
    m.num_layers = 28
    m.hidden_size = 768
    m.num_heads = 12
    m.mlp_dim = 2048  # SwiGLU's width: 2/3 of the config's 3,072, a multiple of 8
    m.vocab_size = 30522  # bert-base-uncased's WordPiece
    m.max_position_embeddings = 4096  # no table: the longest length it is trained at
    m.rope_theta = 10_000.0
    m.layer_norm_eps = 1e-5
    m.initializer_range = 0.02
    m.hidden_act = "silu"
    m.dropout_rate = 0.0
    m.attention_dropout_rate = 0.0
    m.update(layers.compute_keys())
    return m


class NeoBertLayer(nn.Module):
    """x += attention(RMSNorm(x)) with rotary positions; x += SwiGLU(RMSNorm(x))."""
    cfg: ml_collections.ConfigDict
    dtype: jnp.dtype

    @nn.compact
    def __call__(self, x, segments, positions, deterministic):
        cfg = self.cfg
        init = layers.truncated_normal(cfg.initializer_range)
        norm = lambda name: layers.RMSNorm(cfg.layer_norm_eps, self.dtype, name=name)  # noqa: E731
        h = norm("attention_norm")(x)
        h = mha.MultiHeadAttention(
            num_heads=cfg.num_heads, head_dim=cfg.hidden_size // cfg.num_heads,
            dropout_rate=cfg.attention_dropout_rate, use_bias=False, dtype=self.dtype,
            kernel_init=init, float32_logits=cfg.float32_attention_logits,
            impl=cfg.attention_impl, rotary=mha.Rotary(cfg.rope_theta),
            name="attention")(h, h, layers.Mask(segments, segments), deterministic, positions)
        x = x + layers.Dropout(cfg.dropout_rate)(h, deterministic=deterministic)
        h = gated.GatedMlp(cfg.mlp_dim, cfg.hidden_act, 0.0, self.dtype, init, init,
                           name="mlp")(norm("mlp_norm")(x), deterministic)
        x = x + layers.Dropout(cfg.dropout_rate)(h, deterministic=deterministic)
        return layers.constrain(x, ("batch", "length", "embed"))


class NeoBertEncoder(nn.Module):
    """Token embeddings -> the layers -> a final RMSNorm."""
    cfg: ml_collections.ConfigDict

    def setup(self):
        cfg = self.cfg
        self.dtype = jnp.dtype(cfg.dtype)
        self.token_embed = layers.Embed(cfg.vocab_size, cfg.hidden_size, ("vocab", "embed"),
                                        self.dtype, layers.truncated_normal(cfg.initializer_range))
        self.layers = layers.layer_stack(NeoBertLayer, cfg, self.dtype, cfg.num_layers, "layer",
                                         static_argnums=(4,))
        self.final_norm = layers.RMSNorm(cfg.layer_norm_eps, self.dtype)

    def __call__(self, input_ids, segments, positions, deterministic):
        if positions is None:
            positions = layers.every_position(input_ids)
        x = layers.constrain(self.token_embed(input_ids), ("batch", "length", "embed"))
        x = layers.apply_stack(self.layers, x, segments, positions, deterministic)
        return self.final_norm(x)


class NeoBertForMaskedLM(nn.Module):
    """The encoder and the decoder (its own [embed, vocab] kernel and bias) at the
    gathered masked positions."""
    cfg: ml_collections.ConfigDict

    def setup(self):
        cfg = self.cfg
        self.model = NeoBertEncoder(cfg)
        self.decoder = layers.Dense(cfg.vocab_size, ("embed", "vocab"), dtype=jnp.dtype(cfg.dtype),
                                    kernel_init=layers.truncated_normal(cfg.initializer_range))

    def encode(self, batch, deterministic: bool):
        """[batch, length, embed]: the final RMSNorm's states of a padded or packed batch."""
        return self.model(*layers.packed_inputs(batch), deterministic)

    def mlm_logits(self, x, positions):
        picked = jnp.take_along_axis(x, positions[..., None], axis=1)
        logits = self.decoder(layers.constrain(picked, ("batch", "pred", "embed")))
        return layers.constrain(logits, ("batch", "pred", "vocab")).astype(jnp.float32)

    def __call__(self, batch, deterministic: bool = True):
        x = self.encode(batch, deterministic)
        return {"mlm_logits": self.mlm_logits(x, batch["masked_lm_positions"])}


def outputs(cfg, params, batch) -> dict:
    """The final RMSNorm's states and the decoder's logits at every position (what
    pretrainx.load gives)."""
    return heads.mlm_outputs(NeoBertForMaskedLM(cfg), params, batch)


class NeoBertForFineTuning(heads.TaskModel):
    """The authors' sequence classifier: [CLS] -> dropout -> dense -> tanh -> dropout ->
    linear; tokens / span: dropout -> linear at every token. Dropout is the model's
    (0 as released)."""

    @nn.compact
    def __call__(self, batch, deterministic: bool = True):
        cfg = self.cfg
        x = NeoBertEncoder(cfg, name="model")(*layers.packed_inputs(batch), deterministic)
        return heads.task_logits(
            x, batch["attention_mask"], head=self.head, num_labels=self.num_labels,
            deterministic=deterministic, dtype=jnp.dtype(cfg.dtype),
            init=layers.truncated_normal(cfg.initializer_range), dropout_rate=cfg.dropout_rate,
            pooler_width=cfg.hidden_size, dropout_before_pooler=True)


def finetune_model(cfg, head: str, num_labels: int, peft) -> NeoBertForFineTuning:
    return NeoBertForFineTuning(cfg, head, num_labels)


def parameter_count(cfg) -> int:
    """Parameters from the shapes alone: embeddings, per layer the four h x h
    projections, SwiGLU's 3 h x mlp and two norms, the final norm, the decoder."""
    h, mlp, v = cfg.hidden_size, cfg.mlp_dim, cfg.vocab_size
    per_layer = 4 * h * h + 3 * h * mlp + 2 * h
    return v * h + cfg.num_layers * per_layer + h + (h * v + v)


def flops_per_token(cfg, seq_len: int, max_predictions: int) -> float:
    """Training FLOPs per token (forward x 3): per layer the four h x h projections,
    SwiGLU's 3 h x mlp and attention over all `seq_len` keys; the decoder (h x vocab)
    at `max_predictions` positions per row."""
    h = cfg.hidden_size
    dense = cfg.num_layers * 2 * (4 * h * h + 3 * h * cfg.mlp_dim)
    attention = cfg.num_layers * 2 * 2 * seq_len * h
    head = max_predictions * 2 * h * cfg.vocab_size / seq_len
    return 3.0 * (dense + attention + head)
