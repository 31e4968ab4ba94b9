"""ELMo's bidirectional language model (Peters et al. 2018; bilm-tf's architecture).

A word is read from its characters: a char CNN (max over positions of each
filter width, then ReLU), highway layers, and a projection to the LSTM size. Two
stacks of LSTMs with projections (LSTMP: a 4096-cell LSTM whose output is projected
to 512 and fed back), the second layer's output added to its input (residual), run
left to right (forward LM) and right to left (backward LM). The two directions
share the token encoder and the softmax and have their own LSTMs. Cell and
projection values are clipped at 3, as bilm-tf does.

`representations` gives the layers a downstream task mixes with `ScalarMix`: the
token layer (doubled, as the paper does, to match the biLSTM layers' width) and
[forward; backward] of each LSTM layer.
"""

import jax
import jax.numpy as jnp
import ml_collections
from flax import linen as nn

from pretrainx.data import charset
from pretrainx.models import layers


def default_config() -> ml_collections.ConfigDict:
    """ELMo "original"'s model keys (bilm-tf's 2x4096_512_2048cnn_2xhighway)."""
    m = ml_collections.ConfigDict()
    m.family = "elmo"
    m.char_embed_dim = 16
    m.filters = "1:32,2:32,3:64,4:128,5:256,6:512,7:1024"  # width:count, 2048 in all
    m.max_chars = 50  # bytes of a word, with its begin and end markers
    m.num_highway = 2
    m.lstm_dim = 4096
    m.projection_dim = 512
    m.num_layers = 2
    m.cell_clip = 3.0
    m.proj_clip = 3.0
    m.vocab_size = 793_471  # softmax words; rarer words are read but predicted as <UNK>
    m.dropout_rate = 0.1
    m.update(layers.compute_keys(attention=False))
    return m


def parse_filters(spec: str) -> list:
    """"1:32,2:32,3:64" -> [(1, 32), (2, 32), (3, 64)]: (width in chars, filters)."""
    out = []
    for item in spec.split(","):
        width, _, count = item.partition(":")
        out.append((int(width), int(count)))
    return out


def _uniform(scale):
    return lambda key, shape, dtype=jnp.float32: jax.random.uniform(key, shape, dtype,
                                                                    -scale, scale)


class CharEncoder(nn.Module):
    """Char ids [batch, length, max_chars] -> token vectors [batch, length, projection]."""
    cfg: ml_collections.ConfigDict
    dtype: jnp.dtype

    @nn.compact
    def __call__(self, chars):
        cfg = self.cfg
        table = layers.Embed(charset.NUM_CHARS, cfg.char_embed_dim, ("chars", "char_embed"),
                             self.dtype, _uniform(1.0), name="char_embed")
        x = table(chars)  # [b, t, c, d]
        lead = x.shape[:2]
        x = x.reshape((-1,) + x.shape[2:])
        pooled = []
        for width, count in parse_filters(cfg.filters):
            conv = nn.Conv(count, (width,), padding="VALID", dtype=self.dtype,
                           kernel_init=nn.with_logical_partitioning(
                               nn.initializers.lecun_uniform(), (None, "char_embed", "filters")),
                           bias_init=nn.with_logical_partitioning(nn.initializers.zeros,
                                                                  ("filters",)),
                           name=f"conv_{width}")
            pooled.append(jnp.max(conv(x), axis=1))  # max over char positions
        x = jax.nn.relu(jnp.concatenate(pooled, axis=-1))
        n = x.shape[-1]
        for i in range(cfg.num_highway):
            carry = layers.Dense(n, ("filters", "mlp"), dtype=self.dtype,
                                 kernel_init=_uniform(1.0 / n ** 0.5), name=f"highway_{i}_h")(x)
            gate = layers.Dense(n, ("filters", "mlp"), dtype=self.dtype,
                                kernel_init=_uniform(1.0 / n ** 0.5), name=f"highway_{i}_g")(x)
            # bilm-tf starts the transform gate closed (bias -2): layers begin as identity
            g = jax.nn.sigmoid(gate - 2.0)
            x = g * jax.nn.relu(carry) + (1.0 - g) * x
        x = layers.Dense(cfg.projection_dim, ("filters", "embed"), dtype=self.dtype,
                         kernel_init=_uniform(1.0 / n ** 0.5), name="projection")(x)
        return x.reshape(lead + (cfg.projection_dim,))


class LstmpCell(nn.RNNCellBase):
    """One time step of an LSTM with a projected, clipped output (TF's LSTMCell with
    num_proj, as bilm-tf uses it: gates i, g, f, o, forget bias 1): the carry holds
    the cell and the projected output, which is what feeds back. flax's LSTMCell
    takes its hidden size from the carry, so it cannot feed back a projection."""
    lstm_dim: int
    projection_dim: int
    cell_clip: float
    proj_clip: float
    dtype: jnp.dtype

    @nn.compact
    def __call__(self, carry, step):
        x, keep = step  # keep: 0 at padding, which restarts the state
        c, h = carry
        init = nn.initializers.lecun_uniform()
        gates = layers.Dense((4, self.lstm_dim), ("embed", None, "mlp"), use_bias=False,
                             dtype=self.dtype, kernel_init=init, name="input")(x)
        gates = gates + layers.Dense((4, self.lstm_dim), ("embed", None, "mlp"),
                                     dtype=self.dtype, kernel_init=init, name="recurrent")(h)
        i, g, f, o = (gates[:, k] for k in range(4))
        c = jax.nn.sigmoid(f + 1.0) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        c = jnp.clip(c, -self.cell_clip, self.cell_clip)
        h = layers.Dense(self.projection_dim, ("mlp", "embed"), use_bias=False,
                         dtype=self.dtype, kernel_init=init, name="projection")(
                             jax.nn.sigmoid(o) * jnp.tanh(c))
        h = jnp.clip(h, -self.proj_clip, self.proj_clip)
        keep = keep[:, None].astype(c.dtype)
        return (c * keep, h * keep), h

    def initialize_carry(self, rng, input_shape):
        batch = input_shape[:-1]
        return (jnp.zeros(batch + (self.lstm_dim,), self.dtype),
                jnp.zeros(batch + (self.projection_dim,), self.dtype))

    @property
    def num_feature_axes(self) -> int:
        return 1


class LstmLayer(nn.Module):
    """An LSTMP run over the whole row, left to right or (reverse) right to left."""
    cfg: ml_collections.ConfigDict
    dtype: jnp.dtype
    reverse: bool

    @nn.compact
    def __call__(self, x, keep):
        cfg = self.cfg
        scan = nn.scan(LstmpCell, variable_broadcast="params", split_rngs={"params": False},
                       in_axes=1, out_axes=1, reverse=self.reverse)
        cell = scan(cfg.lstm_dim, cfg.projection_dim, cfg.cell_clip, cfg.proj_clip,
                    self.dtype, name="cell")
        carry = cell.initialize_carry(None, x[:, 0].shape)
        _, out = cell(carry, (x, keep))
        return out


class BiLM(nn.Module):
    """(batch: chars, segment_ids) -> forward and backward next-word logits
    [batch, length, vocab] and, with `representations=True`, the layers for ScalarMix."""
    cfg: ml_collections.ConfigDict

    @nn.compact
    def __call__(self, batch, deterministic: bool = True, representations: bool = False):
        cfg = self.cfg
        dtype = jnp.dtype(cfg.dtype)
        keep = batch["segment_ids"] > 0
        drop = layers.Dropout(cfg.dropout_rate)
        tokens = CharEncoder(cfg, dtype, name="token_encoder")(batch["chars"])
        tokens = layers.constrain(tokens, ("batch", "length", "embed"))
        layer_outputs = {"forward": [], "backward": []}
        for direction in ("forward", "backward"):
            x = drop(tokens, deterministic)
            for i in range(cfg.num_layers):
                y = LstmLayer(cfg, dtype, reverse=direction == "backward",
                              name=f"{direction}_{i}")(x, keep)
                if i > 0:  # bilm-tf's skip connection around every layer after the first
                    y = y + x
                layer_outputs[direction].append(y)
                x = drop(y, deterministic)
            layer_outputs[direction + "_top"] = x
        softmax = layers.Dense(cfg.vocab_size, ("embed", "vocab"), dtype=dtype,
                               kernel_init=_uniform(1.0 / cfg.projection_dim ** 0.5),
                               name="softmax")
        out = {f"{d}_logits": layers.constrain(softmax(layer_outputs[d + "_top"]),
                                               ("batch", "length", "vocab")).astype(jnp.float32)
               for d in ("forward", "backward")}
        if representations:
            out["layers"] = [jnp.concatenate([tokens, tokens], -1)] + [
                jnp.concatenate([f, b], -1)
                for f, b in zip(layer_outputs["forward"], layer_outputs["backward"])]
        return out


class ScalarMix(nn.Module):
    """ELMo_task = gamma * sum_j softmax(w)_j h_j: a task's own weighting of the biLM's
    layers (eq. 1 of the paper); w starts at 0 (equal weights), gamma at 1."""
    num_layers: int

    @nn.compact
    def __call__(self, layer_list):
        if len(layer_list) != self.num_layers:
            raise ValueError(f"ScalarMix of {self.num_layers} layers got {len(layer_list)}")
        w = self.param("weights", nn.initializers.zeros, (self.num_layers,), jnp.float32)
        gamma = self.param("gamma", nn.initializers.ones, (), jnp.float32)
        s = jax.nn.softmax(w)
        return gamma * sum(s[j] * h.astype(jnp.float32) for j, h in enumerate(layer_list))


def count_without_softmax(params) -> int:
    """Parameters as the paper counts them (93.6M for the original): all but the
    output softmax, which only pretraining uses."""
    flat = jax.tree_util.tree_leaves_with_path(params)
    return sum(int(leaf.size) for path, leaf in flat
               if "softmax" not in jax.tree_util.keystr(path))


def flops_per_token(cfg) -> float:
    """Training FLOPs per token (forward x 3): the char CNN over max_chars positions,
    highways and projection, 2 directions x layers of LSTMP, and the two softmaxes."""
    filters = parse_filters(cfg.filters)
    n = sum(c for _, c in filters)
    cnn = sum(2 * w * cfg.char_embed_dim * c * (cfg.max_chars - w + 1) for w, c in filters)
    encoder = cnn + cfg.num_highway * 2 * 2 * n * n + 2 * n * cfg.projection_dim
    lstm = 2 * 4 * cfg.lstm_dim * 2 * cfg.projection_dim + 2 * cfg.lstm_dim * cfg.projection_dim
    softmax = 2 * cfg.projection_dim * cfg.vocab_size
    return 3.0 * (encoder + 2 * cfg.num_layers * lstm + 2 * softmax)
