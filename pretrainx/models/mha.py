"""Multi-head attention with logical axis names: the projections, the scores and the
kernel dispatch of models/attention.py. What only some families use is a part the
family passes in, not a field every family fills: `Rotary` positions (ModernBERT),
`Decoding`'s key/value cache (GPT-2, BART), and `peft.Peft` (LoRA on named
projections, prefix-tuning's learned keys and values). Every family's attention is
this module, so a change of kernel reaches them all."""

import dataclasses
import functools
from typing import Callable

import jax
import jax.numpy as jnp
from flax import linen as nn

from pretrainx.models import attention, layers, peft


@dataclasses.dataclass(frozen=True)
class Rotary:
    """Rotary positions with base `theta` on queries and keys (self-attention); the
    call's `positions` [batch, length] restart in every packed example."""
    theta: float

    def __call__(self, q, k, positions):
        if positions is None:
            positions = jnp.broadcast_to(jnp.arange(q.shape[1]), q.shape[:2])
        return layers.rotary(q, positions, self.theta), layers.rotary(k, positions, self.theta)


@dataclasses.dataclass(frozen=True)
class Decoding:
    """Autoregressive decoding: keys and values of earlier steps live in the "cache"
    collection; a call with the full length creates it, calls with one token fill it.
    static_kv (cross attention): keys and values projected from x_kv once, by the
    creating call, and read back by every later one (the encoder's output does not
    change). `window` > 0: a step sees only the keys at most that many places back
    (a sliding-window layer, as attention.Mask's)."""
    static_kv: bool = False
    window: int = 0

    def keys_values(self, module: nn.Module, project: Callable):
        """(keys, values): projected now, or read back when static and cached."""
        if not self.static_kv:
            return project()
        if module.has_variable("cache", "static_key"):
            return (module.get_variable("cache", "static_key"),
                    module.get_variable("cache", "static_value"))
        k, v = project()
        module.put_variable("cache", "static_key", k)
        module.put_variable("cache", "static_value", v)
        return k, v

    def extend(self, module: nn.Module, k, v, bias, dtype):
        """Append this step's keys/values to the cache; attend to everything so far
        (static keys and values are the cache already)."""
        if self.static_kv:
            return k, v, bias
        ready = module.has_variable("cache", "cached_key")
        key = module.variable("cache", "cached_key", jnp.zeros, k.shape, k.dtype)
        value = module.variable("cache", "cached_value", jnp.zeros, v.shape, v.dtype)
        index = module.variable("cache", "cache_index", lambda: jnp.zeros((), jnp.int32))
        if not ready:  # the initialising call: shapes only
            return k, v, bias
        i = index.value
        key.value = jax.lax.dynamic_update_slice(key.value, k, (0, i, 0, 0))
        value.value = jax.lax.dynamic_update_slice(value.value, v, (0, i, 0, 0))
        index.value = i + k.shape[1]
        place = jnp.arange(key.value.shape[1])
        seen = place < index.value
        if self.window:  # the step's last token is at index - 1
            seen = seen & (index.value - 1 - place <= self.window)
        return key.value, value.value, attention.mask_to_bias(seen[None, None, None, :], dtype)


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
    # model.attention_impl (models/attention.py); a kernel needs `bias` as an
    # attention.Mask (a dense bias, prefix-tuning and decoding run on XLA's path)
    impl: str = "xla"
    rotary: Rotary | None = None
    decoding: Decoding | None = None
    tuning: peft.Peft = peft.Peft()
    # grouped-query attention (Ainslie et al. 2023): keys and values of this many heads,
    # each shared by num_heads / kv_heads query heads (0: one per query head)
    kv_heads: int = 0
    # > 0: queries and keys RMS-normed over each head, with this epsilon, before the
    # rotary positions (QK-norm: Qwen3, Gemma 3); qk_norm_plus_one: Gemma's (1 + scale)
    qk_norm_eps: float = 0.0
    qk_norm_plus_one: bool = False
    # > 0: the queries' scale instead of head_dim ** -0.5 (Gemma's
    # query_pre_attn_scalar ** -0.5)
    query_scale: float = 0.0
    # > 0: scores soft-capped to (-cap, cap) by cap * tanh(s / cap) before the mask
    # (Gemma 2's, T5Gemma's attn_logit_softcapping); XLA's path only
    logit_softcap: float = 0.0

    @nn.compact
    def __call__(self, x_q, x_kv, bias, deterministic: bool, positions=None):
        def project(name, x, init=None, heads=self.num_heads):
            return layers.Dense(features=(heads, self.head_dim),
                                kernel_axes=("embed", "heads", "kv"), use_bias=self.use_bias,
                                dtype=self.dtype, kernel_init=init or self.kernel_init,
                                lora=self.tuning.lora_on(name), name=name)(x, deterministic)

        q = project("query", x_q, self.query_init)
        kv_heads = self.kv_heads or self.num_heads
        k, v = ((self.decoding or Decoding()).keys_values(
            self, lambda: (project("key", x_kv, heads=kv_heads),
                           project("value", x_kv, heads=kv_heads))))
        if self.qk_norm_eps:
            norm = functools.partial(layers.RMSNorm, self.qk_norm_eps, self.dtype, "kv",
                                     self.qk_norm_plus_one)
            q, k = norm(name="query_norm")(q), norm(name="key_norm")(k)
        if self.rotary is not None:
            q, k = self.rotary(q, k, positions)
        dense_only = self.tuning.prefix_length or self.decoding is not None
        mask = bias if isinstance(bias, attention.Mask) else None
        impl = attention.choose(self.impl, mask is not None and mask.extra is not None,
                                self.dropout_rate > 0, self.dtype)
        if mask is not None and mask.kv_prefix is not None and self.impl == "auto":
            impl = "xla"  # no kernel takes a PrefixLM's mask
        if self.logit_softcap and impl != "xla":
            if self.impl != "auto":
                raise ValueError(f"attention_impl={impl} cannot soft-cap scores; use xla or auto")
            impl = "xla"
        if mask is not None and (impl == "xla" or dense_only):
            bias, mask = mask.dense(self.dtype), None
        elif mask is None and impl != "xla":
            raise ValueError(f"attention_impl={impl} needs an attention.Mask; this model "
                             "builds a dense bias (attention_impl=xla only)")
        if self.tuning.prefix_length:
            k, v, bias = peft.with_prefix(self, k, v, bias, self.tuning.prefix_length,
                                          self.dtype)
        if self.decoding is not None:
            k, v, bias = self.decoding.extend(self, k, v, bias, self.dtype)
        if kv_heads != self.num_heads:  # each key/value head serves its group of queries
            k, v = (jnp.repeat(t, self.num_heads // kv_heads, axis=2) for t in (k, v))
            if self.logit_softcap:
                # kept whole: jax 0.10's XLA:CPU fused the repeat, sharded over a mesh,
                # into soft-capped cross-attention scores as NaNs (jax 0.12 does not)
                k, v = jax.lax.optimization_barrier((k, v))
        # Head-major [batch, heads, length, kv] for the two batched matmuls: 12% faster
        # on XLA:CPU than contracting in the projection's [batch, length, heads, kv].
        q, k, v = (layers.constrain(jnp.swapaxes(t, 1, 2), ("batch", "heads", "length", "kv"))
                   for t in (q, k, v))
        if self.scale_queries:
            q = q * jnp.asarray(self.query_scale or self.head_dim ** -0.5, self.dtype)
        if mask is not None:  # a kernel: no probabilities leave it, so no dropout on them
            if self.dropout_rate > 0 and not deterministic:
                raise ValueError(f"attention_impl={impl} cannot apply attention dropout "
                                 f"({self.dropout_rate}); attention.validate refuses this")
            out = attention.attend(impl, q, k, v, mask, self.path).astype(self.dtype)
            out = jnp.swapaxes(out, 1, 2)
        else:
            scores = jnp.einsum("bhqd,bhkd->bhqk", q, k)
            logits_dtype = jnp.float32 if self.float32_logits else self.dtype
            if self.logit_softcap:
                cap = jnp.asarray(self.logit_softcap, logits_dtype)
                scores = cap * jnp.tanh(scores.astype(logits_dtype) / cap)
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
                            lora=self.tuning.lora_on("out"), name="out")(out, deterministic)
