"""T5's relative positions (Raffel et al. 2020): key - query distances in buckets, exact
near the query and logarithmic up to a maximum, one learned bias per bucket and head added
to the attention scores. T5 uses them; BERT takes them with model.position_embedding =
"relative" (a modification the comparison grid tries)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn


def relative_position_bucket(relative_position, bidirectional: bool, num_buckets: int,
                             max_distance: int):
    """T5's bucketing of key_position - query_position: exact for small distances,
    logarithmic up to `max_distance`, one bucket beyond. Works on numpy or jax."""
    xp = jnp if isinstance(relative_position, jax.Array) else np
    n = -relative_position
    bucket = 0
    if bidirectional:
        num_buckets //= 2
        bucket = (n < 0).astype(np.int32) * num_buckets
        n = xp.abs(n)
    else:
        n = xp.maximum(n, 0)
    max_exact = num_buckets // 2
    scaled = xp.log(n.astype(np.float32) / max_exact + np.finfo(np.float32).eps)
    large = max_exact + (scaled / math.log(max_distance / max_exact)
                         * (num_buckets - max_exact)).astype(np.int32)
    large = xp.minimum(large, num_buckets - 1)
    return bucket + xp.where(n < max_exact, n, large)


class RelativePositionBias(nn.Module):
    """[1, heads, q_len, k_len] additive attention bias from bucketed distances."""
    num_buckets: int
    max_distance: int
    num_heads: int
    bidirectional: bool
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, q_len: int, k_len: int):
        table = self.param("rel_embedding", nn.with_logical_partitioning(
            nn.initializers.variance_scaling(1.0, "fan_avg", "uniform"),
            ("relpos_buckets", "heads")), (self.num_buckets, self.num_heads), jnp.float32)
        relative = np.arange(k_len)[None, :] - np.arange(q_len)[:, None]
        buckets = relative_position_bucket(relative, self.bidirectional, self.num_buckets,
                                           self.max_distance)
        # A one-hot matmul rather than a gather: it shards over heads like any weight.
        one_hot = jax.nn.one_hot(buckets, self.num_buckets, dtype=self.dtype)
        bias = jnp.einsum("qkb,bh->hqk", one_hot, table.astype(self.dtype))
        return bias[None]
