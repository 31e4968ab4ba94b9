"""Dropout whose masks come from an integer hash of each element's position.

Threefry costs about 10 ns per draw on a CPU, a fifth of a small BERT's step; two
rounds of an integer hash cost a few ops. The mask depends on where an element is in
the global array, not on which device holds it, so it is the same however the array
is sharded.
"""

import math

import jax
import jax.numpy as jnp
from flax import linen as nn


def mix32(h):
    """lowbias32 (C. Wellons): a well-avalanched 32-bit integer hash."""
    h = h ^ (h >> 16)
    h = h * jnp.uint32(0x7FEB352D)
    h = h ^ (h >> 15)
    h = h * jnp.uint32(0x846CA68B)
    return h ^ (h >> 16)


_WORD = 2 ** 32


def index_words(shape, start=None, window=None):
    """Each element's row-major position in an array of `shape` as two uint32 words,
    from iotas (so they partition with the array: a mask depends on where an element
    is, not on which device holds it): `low`, the position mod 2^32, and `high`, the
    index over the leading dimensions that take the array past 2^32 elements (None
    for a smaller array), so that (low, high) is unique to each element.

    `start` and `window` evaluate a window of the array instead of all of it, for
    tests that look at arrays too large to build.
    """
    window = tuple(window or shape)
    start = tuple(start or (0,) * len(shape))
    low, stride = jnp.zeros(window, jnp.uint32), 1
    for dim in reversed(range(len(shape))):
        iota = jax.lax.broadcasted_iota(jnp.uint32, window, dim) + jnp.uint32(start[dim])
        low = low + iota * jnp.uint32(stride % _WORD)
        stride *= shape[dim]
    split = 0  # the trailing dimensions [split:] hold fewer than 2^32 elements
    while math.prod(shape[split:]) >= _WORD:
        split += 1
    if split == 0:
        return low, None
    high, stride = jnp.zeros(window, jnp.uint32), 1
    for dim in reversed(range(split)):
        iota = jax.lax.broadcasted_iota(jnp.uint32, window, dim) + jnp.uint32(start[dim])
        high = high + iota * jnp.uint32(stride)
        stride *= shape[dim]
    return low, high


def keep_bits(low, high, seeds):
    """32 random bits per element from its index words and two per-call seeds. Arrays
    under 2^32 elements hash their position alone; larger ones mix in the high word,
    so elements 2^32 apart no longer share a mask."""
    bits = mix32(mix32(low + seeds[0]) ^ seeds[1])
    if high is not None:
        bits = mix32(bits ^ mix32(high + jnp.uint32(0x9E3779B9)))
    return bits


class Dropout(nn.Module):
    """Inverted dropout whose keep mask hashes each element's index with a per-call
    random seed.

    Threefry costs about 10 ns per draw on a CPU, a fifth of a small BERT's step;
    two rounds of an integer hash cost a few ops. The rate is exact to 2^-32 and the
    mask is the same however the array is sharded.
    """
    rate: float

    @nn.compact
    def __call__(self, x, deterministic: bool):
        if deterministic or self.rate == 0.0:
            return x
        seeds = jax.random.bits(self.make_rng("dropout"), (2,), jnp.uint32)
        bits = keep_bits(*index_words(x.shape), seeds)
        threshold = jnp.uint32(min(int(round(self.rate * 2.0 ** 32)), 2 ** 32 - 1))
        keep = bits >= threshold
        return jnp.where(keep, x / jnp.asarray(1.0 - self.rate, x.dtype), jnp.zeros_like(x))
