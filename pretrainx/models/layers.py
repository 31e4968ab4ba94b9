"""Shared transformer blocks with logical axis names on every parameter.

Parameters are created float32 and cast to the compute dtype at use, so that a
bfloat16 run keeps float32 master weights. Axis names used: batch, length, embed,
heads, kv, mlp, vocab, position, type_vocab.
"""

import dataclasses
import functools
import math
from typing import Callable

import jax
import jax.numpy as jnp
from flax import linen as nn

from pretrainx.models import target
from pretrainx.models.attention import Mask, mask_to_bias, prefix_of, segment_mask  # noqa: F401
from pretrainx.models.dropout import Dropout  # noqa: F401  (every family's dropout)

Dtype = jnp.dtype


def truncated_normal(stddev: float) -> Callable:
    """TF's truncated_normal_initializer: N(0, stddev) cut at two stddevs, not rescaled.

    jax's own truncated_normal rescales to keep the std; BERT's checkpoints were
    trained from the unrescaled one, so we follow them.
    """
    def init(key, shape, dtype=jnp.float32):
        return stddev * jax.random.truncated_normal(key, -2.0, 2.0, shape, dtype)
    return init


def activation(name: str) -> Callable:
    return {
        "gelu": functools.partial(jax.nn.gelu, approximate=False),
        "gelu_tanh": functools.partial(jax.nn.gelu, approximate=True),
        "relu": jax.nn.relu,
        "silu": jax.nn.silu,  # SwiGLU's gate (NeoBERT)
        "tanh": jnp.tanh,
    }[name]


def compute_keys(attention: bool = True) -> dict:
    """The model keys that say how a model computes, not what it is, with the defaults
    every family starts from: the compute dtype (parameters stay float32), remat,
    scanned layers, and with attention the softmax's dtype and the attention kernel
    (models/attention.py: xla | flash | splash | cudnn | auto)."""
    keys = {"dtype": "float32", "remat": "none", "scan_layers": False}
    if attention:
        keys.update(float32_attention_logits=False, attention_impl="xla")
    return keys


REMAT_POLICIES = {  # what a layer keeps for the backward pass; the rest is recomputed
    "full": None,  # nothing but its inputs
    "dots": jax.checkpoint_policies.checkpoint_dots_with_no_batch_dims,  # matmul outputs
}


def layer_stack(cls, cfg, dtype, count: int, prefix: str, static_argnums: tuple,
                shared: bool = False, stack_name: str = "", **kwargs) -> list:
    """`count` layers of `cls` applied in sequence, as a list of modules that each map
    x -> x (call them in order, or with `apply_stack`).

    Unrolled: modules named prefix_0, prefix_1, ... With cfg.scan_layers: one
    nn.scan named `prefix`s whose parameters stack on a leading `layers` axis, so
    the compiled program holds one layer whatever the depth (MaxText's scan_layers).
    `static_argnums` (counting self) marks the `deterministic` flag for remat.

    shared (ALBERT's cross-layer sharing): one layer's parameters, named
    prefix_shared, applied `count` times; scanned, the parameters are broadcast to
    every iteration instead of stacked, so both forms have the same parameter tree.
    `stack_name` names the scan (default prefix + "s"; interop's unstack_layers reads
    "layers" and "layers_from_N", a stack of groups of layers from layer N).
    """
    scan = cfg.scan_layers
    if cfg.remat != "none":
        cls = nn.remat(cls, policy=REMAT_POLICIES[cfg.remat], static_argnums=static_argnums,
                       prevent_cse=not scan)
    if not scan:
        if shared:  # the same module, so the same parameters, at every depth
            return [cls(cfg, dtype, name=f"{prefix}_shared", **kwargs)] * count
        return [cls(cfg, dtype, name=f"{prefix}_{i}", **kwargs) for i in range(count)]
    if shared:
        scanned = nn.scan(_as_scan_body(cls), variable_broadcast="params",
                          split_rngs={"params": False, "dropout": True}, in_axes=nn.broadcast,
                          length=count)
        return [_carry_only(scanned)(cfg, dtype, name=f"{prefix}_shared", **kwargs)]
    scanned = nn.scan(_as_scan_body(cls), variable_axes={"params": 0},
                      split_rngs={"params": True, "dropout": True}, in_axes=nn.broadcast,
                      length=count,
                      metadata_params={nn.PARTITION_NAME: "layers"})
    return [_carry_only(scanned)(cfg, dtype, name=stack_name or f"{prefix}s", **kwargs)]


def _as_scan_body(layer_cls):
    """A layer (x -> x) as nn.scan's body: x -> (carry, no per-layer output)."""
    class Body(layer_cls):
        def __call__(self, x, *args):
            return super().__call__(x, *args), None
    return Body


def _carry_only(scanned_cls):
    """The scanned stack called as a layer is: x -> x."""
    class Scanned(scanned_cls):
        def __call__(self, x, *args):
            return super().__call__(x, *args)[0]
    return Scanned


def apply_stack(stack: list, x, *args):
    """x through each layer of a `layer_stack` in order."""
    for layer in stack:
        x = layer(x, *args)
    return x


def constrain(x, axes):
    return nn.with_logical_constraint(x, axes)


def packed_inputs(batch):
    """(input_ids, segment ids, positions or None) of a padded or packed encoder batch."""
    return batch["input_ids"], batch["attention_mask"], batch.get("positions")


def every_position(x):
    """[batch, length] positions 0 .. length-1 of `x` [batch, length, ...]: a head that
    gathers positions, applied everywhere."""
    return jnp.broadcast_to(jnp.arange(x.shape[1]), x.shape[:2])


def mean_over_tokens(x, segments):
    """[batch, embed]: the mean of each row's real (segment > 0) tokens."""
    real = (segments > 0)[..., None].astype(x.dtype)
    return (x * real).sum(axis=1) / jnp.maximum(real.sum(axis=1), 1)


@dataclasses.dataclass(frozen=True)
class Lora:
    """Low-rank update of a frozen kernel (Hu et al. 2021): W + (alpha / rank) A B with
    A ~ U(+-1/sqrt(fan_in)) (PEFT's default) and B = 0, so training starts exactly
    from the pretrained model; dropout applies to the low-rank path's input only."""
    rank: int
    alpha: float
    dropout: float = 0.0


class Dense(nn.Module):
    """y = x . W + b over the trailing `in_axes` dims, with named kernel axes."""
    features: tuple
    kernel_axes: tuple
    in_dims: int = 1
    use_bias: bool = True
    dtype: Dtype = jnp.float32
    kernel_init: Callable = truncated_normal(0.02)
    lora: Lora | None = None

    @nn.compact
    def __call__(self, x, deterministic: bool = True):
        features = tuple(self.features) if isinstance(self.features, (tuple, list)) else (self.features,)
        in_shape = x.shape[-self.in_dims:]
        kernel = self.param("kernel", nn.with_logical_partitioning(self.kernel_init, self.kernel_axes),
                            in_shape + features, jnp.float32)
        x_c, kernel_c = x.astype(self.dtype), kernel.astype(self.dtype)
        if target.backend() == "cpu":
            # As one 2-D matmul over all tokens: XLA:CPU ran the same product written
            # as a 3-D einsum 30% slower once an activation sat between two of them.
            lead = x.shape[:x.ndim - self.in_dims]
            n_in, n_out = math.prod(in_shape), math.prod(features)
            y = (x_c.reshape((-1, n_in)) @ kernel_c.reshape((n_in, n_out))).reshape(
                lead + features)
        else:
            # On a TPU the 2-D form's reshapes pin layouts: BERT-Base's step on v5e paid
            # 8 ms of copies for them (docs/accelerators.md); contracted in place, none.
            contract = (tuple(range(x.ndim - self.in_dims, x.ndim)), tuple(range(self.in_dims)))
            y = jax.lax.dot_general(x_c, kernel_c, (contract, ((), ())))
        if self.use_bias:
            bias_axes = self.kernel_axes[self.in_dims:]
            bias = self.param("bias", nn.with_logical_partitioning(nn.initializers.zeros, bias_axes),
                              features, jnp.float32)
            y = y + bias.astype(self.dtype)
        if self.lora is not None:
            y = y + self._low_rank(x, in_shape, features, deterministic)
        return y

    def _low_rank(self, x, in_shape, features, deterministic):
        r = self.lora.rank
        bound = math.prod(in_shape) ** -0.5
        a = self.param("lora_a", nn.with_logical_partitioning(
            lambda key, shape, dtype: jax.random.uniform(key, shape, dtype, -bound, bound),
            self.kernel_axes[:self.in_dims] + ("lora_rank",)),
            in_shape + (r,), jnp.float32)
        b = self.param("lora_b", nn.with_logical_partitioning(
            nn.initializers.zeros, ("lora_rank",) + self.kernel_axes[self.in_dims:]),
            (r,) + features, jnp.float32)
        x = Dropout(self.lora.dropout)(x, deterministic=deterministic)
        flat = x.astype(self.dtype).reshape((-1, math.prod(in_shape)))
        h = flat @ a.astype(self.dtype).reshape((-1, r))
        y = (h @ b.astype(self.dtype).reshape((r, -1))) * jnp.asarray(self.lora.alpha / r,
                                                                      self.dtype)
        return y.reshape(x.shape[:x.ndim - self.in_dims] + features)


class LayerNorm(nn.Module):
    """LayerNorm over `embed`, statistics in float32 whatever the compute dtype;
    use_bias=False drops the shift (ModernBERT's norms)."""
    eps: float = 1e-12
    dtype: Dtype = jnp.float32
    use_bias: bool = True

    @nn.compact
    def __call__(self, x):
        features = x.shape[-1]
        scale = self.param("scale", nn.with_logical_partitioning(nn.initializers.ones, ("embed",)),
                           (features,), jnp.float32)
        x32 = x.astype(jnp.float32)
        # Both moments in one pass over x, var = E[x^2] - E[x]^2 (flax.linen.LayerNorm's
        # default): on v5e the compiler then folds the statistics into the matmul
        # fusions beside them, 3.6 of BERT-Base's 53.8 ms a step (docs/accelerators.md).
        mean = jnp.mean(x32, axis=-1, keepdims=True)
        mean_of_squares = jnp.mean(jnp.square(x32), axis=-1, keepdims=True)
        var = jnp.maximum(mean_of_squares - jnp.square(mean), 0.0)
        y = (x32 - mean) * jax.lax.rsqrt(var + self.eps) * scale
        if self.use_bias:
            y = y + self.param("bias", nn.with_logical_partitioning(
                nn.initializers.zeros, ("embed",)), (features,), jnp.float32)
        return y.astype(self.dtype)


def rotary(x, positions, theta: float):
    """Rotary position embedding (Su et al. 2021) of x [batch, length, heads, head_dim]
    at integer `positions` [batch, length], in the half-split layout (GPT-NeoX, HF's
    rotate_half): dimension i pairs with i + head_dim/2. Angles in float32."""
    half = x.shape[-1] // 2
    inv_freq = 1.0 / (theta ** (jnp.arange(0, half, dtype=jnp.float32) * 2 / x.shape[-1]))
    angles = positions.astype(jnp.float32)[..., None] * inv_freq  # [batch, length, half]
    cos = jnp.concatenate([jnp.cos(angles)] * 2, -1)[:, :, None, :].astype(x.dtype)
    sin = jnp.concatenate([jnp.sin(angles)] * 2, -1)[:, :, None, :].astype(x.dtype)
    turned = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + turned * sin


class RMSNorm(nn.Module):
    """T5's LayerNorm: scale only, no mean subtraction, no bias; float32 statistics.
    `axis`: the logical name of the normed dimension ("kv" for a per-head norm).
    `plus_one`: Gemma's form, which multiplies by (1 + scale) with the scale starting
    at zero (the product taken in float32 before the cast, as Gemma's code does)."""
    eps: float = 1e-6
    dtype: Dtype = jnp.float32
    axis: str = "embed"
    plus_one: bool = False

    @nn.compact
    def __call__(self, x):
        init = nn.initializers.zeros if self.plus_one else nn.initializers.ones
        scale = self.param("scale", nn.with_logical_partitioning(init, (self.axis,)),
                           (x.shape[-1],), jnp.float32)
        x32 = x.astype(jnp.float32)
        y = x32 * jax.lax.rsqrt(jnp.mean(jnp.square(x32), axis=-1, keepdims=True) + self.eps)
        return (y * (1.0 + scale if self.plus_one else scale)).astype(self.dtype)


class Embed(nn.Module):
    """A lookup table whose rows are named by `axes[0]` (vocab, position, ...)."""
    num_embeddings: int
    features: int
    axes: tuple = ("vocab", "embed")
    dtype: Dtype = jnp.float32
    embedding_init: Callable = truncated_normal(0.02)

    def setup(self):
        self.embedding = self.param(
            "embedding", nn.with_logical_partitioning(self.embedding_init, self.axes),
            (self.num_embeddings, self.features), jnp.float32)

    def __call__(self, ids):
        return jnp.take(self.embedding, ids, axis=0).astype(self.dtype)

    def attend(self, x):
        """x . E^T: the output projection tied to this table."""
        lead = x.shape[:-1]
        flat = x.astype(self.dtype).reshape((-1, x.shape[-1]))
        return (flat @ self.embedding.astype(self.dtype).T).reshape(lead + (self.num_embeddings,))


def output_layer(cfg, dtype, kernel_init: Callable):
    """The vocabulary projection's own [embed, vocab] kernel (`output/kernel`) when
    model.tie_output is False (an HF checkpoint saved with tie_word_embeddings=False),
    else None: the output layer is the word table (`vocab_logits`)."""
    if cfg.tie_output:
        return None
    return Dense(cfg.vocab_size, ("embed", "vocab"), use_bias=False, dtype=dtype,
                 kernel_init=kernel_init)


def vocab_logits(table: Embed, output, h):
    """h [..., embed] -> [..., vocab]: through `output` if the model has one of its own,
    else through the word table (x . E^T)."""
    return table.attend(h) if output is None else output(h)


class Mlp(nn.Module):
    mlp_dim: int
    act: str = "gelu_tanh"
    dtype: Dtype = jnp.float32
    kernel_init: Callable = truncated_normal(0.02)
    out_init: Callable | None = None  # GPT-2 scales the residual projections' init
    lora: Lora | None = None
    lora_targets: tuple = ()  # wi, wo

    @nn.compact
    def __call__(self, x, deterministic: bool = True):
        def lora(name):
            return self.lora if name in self.lora_targets else None

        h = Dense(features=self.mlp_dim, kernel_axes=("embed", "mlp"), dtype=self.dtype,
                  kernel_init=self.kernel_init, lora=lora("wi"), name="wi")(x, deterministic)
        h = constrain(activation(self.act)(h), ("batch", "length", "mlp"))
        return Dense(features=x.shape[-1], kernel_axes=("mlp", "embed"), dtype=self.dtype,
                     kernel_init=self.out_init or self.kernel_init, lora=lora("wo"),
                     name="wo")(h, deterministic)
