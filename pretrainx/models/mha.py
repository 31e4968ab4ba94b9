"""Multi-head attention with logical axis names: projections (with LoRA on the named
ones), rotary positions, the kernel dispatch of models/attention.py, and the state
some uses keep beside it (a decoding cache, prefix-tuning's learned keys and values).
Every family's attention is this module, so a change of kernel reaches them all."""

from typing import Callable

import jax
import jax.numpy as jnp
from flax import linen as nn

from pretrainx.models import attention, layers


class MultiHeadAttention(nn.Module):
    num_heads: int
    head_dim: int
    dropout_rate: float = 0.0
    use_bias: bool = True
    dtype: jnp.dtype = jnp.float32
    kernel_init: Callable = layers.truncated_normal(0.02)
    out_init: Callable | None = None
    query_init: Callable | None = None
    scale_queries: bool = True  # T5 folds 1/sqrt(head_dim) into the query init instead
    # As T5X's `float32_logits`: False keeps scores and softmax in the compute dtype,
    # which saves 2% of BERT-Base's step at length 512 on v3 (the softmax residual is
    # the largest tensor the backward pass reads).
    float32_logits: bool = False
    # Parameter-efficient tuning: LoRA on the named projections (query, key, value,
    # out), and prefix-tuning's learned keys and values that every query may attend to.
    lora: layers.Lora | None = None
    lora_targets: tuple = ()
    prefix_length: int = 0
    # Autoregressive decoding: keys and values of earlier steps live in the "cache"
    # collection; a call with the full length creates it, calls with one token fill it.
    decode: bool = False
    # With decode, cross attention's keys and values: projected from x_kv by the creating
    # call and read back by every later one (the encoder's output does not change).
    static_kv: bool = False
    # model.attention_impl (models/attention.py); a kernel needs `bias` as an
    # attention.Mask (a dense bias, prefix-tuning and decoding run on XLA's path)
    impl: str = "xla"
    # > 0: rotary positions with this base on queries and keys (self-attention; the
    # call's `positions` [batch, length], which restart in every packed example)
    rope_theta: float = 0.0

    @nn.compact
    def __call__(self, x_q, x_kv, bias, deterministic: bool, positions=None):
        def project(name, x, init=None):
            lora = self.lora if name in self.lora_targets else None
            return layers.Dense(features=(self.num_heads, self.head_dim),
                                kernel_axes=("embed", "heads", "kv"), use_bias=self.use_bias,
                                dtype=self.dtype, kernel_init=init or self.kernel_init,
                                lora=lora, name=name)(x, deterministic)

        q = project("query", x_q, self.query_init)
        if self.decode and self.static_kv:
            k, v = self._static_kv(lambda: (project("key", x_kv), project("value", x_kv)))
        else:
            k = project("key", x_kv)
            v = project("value", x_kv)
        if self.rope_theta:
            if positions is None:
                positions = jnp.broadcast_to(jnp.arange(x_q.shape[1]), x_q.shape[:2])
            q = layers.rotary(q, positions, self.rope_theta)
            k = layers.rotary(k, positions, self.rope_theta)
        mask = bias if isinstance(bias, attention.Mask) else None
        impl = attention.choose(self.impl, mask is not None and mask.extra is not None,
                                self.dropout_rate > 0, self.dtype)
        if mask is not None and (impl == "xla" or self.prefix_length or self.decode):
            bias, mask = mask.dense(self.dtype), None
        elif mask is None and impl != "xla":
            raise ValueError(f"attention_impl={impl} needs an attention.Mask; this model "
                             "builds a dense bias (attention_impl=xla only)")
        if self.prefix_length:
            k, v, bias = self._with_prefix(k, v, bias)
        if self.decode and not self.static_kv:
            k, v, bias = self._cached(k, v, bias)
        # Head-major [batch, heads, length, kv] for the two batched matmuls: 12% faster
        # on XLA:CPU than contracting in the projection's [batch, length, heads, kv].
        q, k, v = (layers.constrain(jnp.swapaxes(t, 1, 2), ("batch", "heads", "length", "kv"))
                   for t in (q, k, v))
        if self.scale_queries:
            q = q * jnp.asarray(self.head_dim ** -0.5, self.dtype)
        if mask is not None:  # a kernel: no probabilities leave it, so no dropout on them
            if self.dropout_rate > 0 and not deterministic:
                raise ValueError(f"attention_impl={impl} cannot apply attention dropout "
                                 f"({self.dropout_rate}); attention.validate refuses this")
            out = attention.attend(impl, q, k, v, mask, self.path).astype(self.dtype)
            out = jnp.swapaxes(out, 1, 2)
        else:
            scores = jnp.einsum("bhqd,bhkd->bhqk", q, k)
            logits_dtype = jnp.float32 if self.float32_logits else self.dtype
            probs = jax.nn.softmax(scores.astype(logits_dtype) + bias.astype(logits_dtype),
                                   axis=-1)
            probs = probs.astype(self.dtype)
            self.sow("intermediates", "probs", probs)  # read by distillation; free otherwise
            probs = layers.Dropout(self.dropout_rate)(probs, deterministic=deterministic)
            out = jnp.swapaxes(jnp.einsum("bhqk,bhkd->bhqd", probs, v), 1, 2)
        out = layers.constrain(out, ("batch", "length", "heads", "kv"))
        return layers.Dense(features=x_q.shape[-1], kernel_axes=("heads", "kv", "embed"),
                            in_dims=2, use_bias=self.use_bias, dtype=self.dtype,
                            kernel_init=self.out_init or self.kernel_init,
                            lora=self.lora if "out" in self.lora_targets else None,
                            name="out")(out, deterministic)

    def _cached(self, k, v, bias):
        """Append this step's keys/values to the cache; attend to everything so far."""
        ready = self.has_variable("cache", "cached_key")
        key = self.variable("cache", "cached_key", jnp.zeros, k.shape, k.dtype)
        value = self.variable("cache", "cached_value", jnp.zeros, v.shape, v.dtype)
        index = self.variable("cache", "cache_index", lambda: jnp.zeros((), jnp.int32))
        if not ready:  # the initialising call: shapes only
            return k, v, bias
        i = index.value
        key.value = jax.lax.dynamic_update_slice(key.value, k, (0, i, 0, 0))
        value.value = jax.lax.dynamic_update_slice(value.value, v, (0, i, 0, 0))
        index.value = i + k.shape[1]
        seen = jnp.arange(key.value.shape[1]) < index.value
        return key.value, value.value, attention.mask_to_bias(seen[None, None, None, :], self.dtype)

    def _static_kv(self, projected):
        """Keys and values projected once, by the call that creates the cache."""
        if self.has_variable("cache", "static_key"):
            return (self.get_variable("cache", "static_key"),
                    self.get_variable("cache", "static_value"))
        k, v = projected()
        self.put_variable("cache", "static_key", k)
        self.put_variable("cache", "static_value", v)
        return k, v

    def _with_prefix(self, k, v, bias):
        """Prefix-tuning (Li & Liang 2021): learned keys and values in front of the
        sequence's, parametrised directly (as P-tuning v2) rather than through an MLP."""
        shape = (self.prefix_length, self.num_heads, self.head_dim)
        axes = ("prefix", "heads", "kv")
        init = nn.with_logical_partitioning(layers.truncated_normal(0.02), axes)
        pk = self.param("prefix_key", init, shape, jnp.float32).astype(self.dtype)
        pv = self.param("prefix_value", init, shape, jnp.float32).astype(self.dtype)
        batch = k.shape[0]
        k = jnp.concatenate([jnp.broadcast_to(pk, (batch,) + shape), k], axis=1)
        v = jnp.concatenate([jnp.broadcast_to(pv, (batch,) + shape), v], axis=1)
        open_bias = jnp.zeros(bias.shape[:-1] + (self.prefix_length,), bias.dtype)
        return k, v, jnp.concatenate([open_bias, bias], axis=-1)
