"""Model-level behaviour: dropout statistics, attention reaching context, sizes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import load_config
from pretrainx.families.bert.model import default_config
from pretrainx.families.bert.model import BertForPreTraining
from pretrainx.models.layers import Dropout
from pretrainx.train import loop


def test_dropout_rate_independence_and_scaling():
    x = jnp.ones((16, 4, 128, 128))
    a = Dropout(0.1).apply({}, x, False, rngs={"dropout": jax.random.key(0)})
    b = Dropout(0.1).apply({}, x, False, rngs={"dropout": jax.random.key(1)})
    kept_a, kept_b = np.asarray(a) != 0, np.asarray(b) != 0
    assert abs(1 - kept_a.mean() - 0.1) < 0.002
    assert np.allclose(np.asarray(a)[kept_a], 1 / 0.9)  # inverted dropout keeps the mean
    both_dropped = (~kept_a & ~kept_b).mean()
    assert abs(both_dropped - 0.01) < 0.002  # masks of two keys are independent
    per_column = kept_a.mean(axis=(0, 1, 2))
    assert per_column.std() < 3 * np.sqrt(0.09 / (16 * 4 * 128))  # no positional pattern
    assert np.array_equal(Dropout(0.1).apply({}, x, True), x)  # off at eval


def test_masked_prediction_depends_on_its_neighbours():
    cfg = default_config()
    cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.mlp_dim, cfg.vocab_size = 2, 64, 2, 128, 100
    model = BertForPreTraining(cfg)
    batch = {"input_ids": jnp.arange(16)[None] + 5, "token_type_ids": jnp.zeros((1, 16), jnp.int32),
             "attention_mask": jnp.array([[1] * 12 + [0] * 4]),
             "masked_lm_positions": jnp.array([[5]]), "masked_lm_ids": jnp.array([[0]]),
             "masked_lm_weights": jnp.ones((1, 1))}
    params = jax.jit(model.init)({"params": jax.random.key(0)}, batch)
    apply = jax.jit(model.apply)  # eagerly, every op of every layer compiles alone
    base = apply(params, batch)["mlm_logits"]

    def changed_at(pos):
        ids = batch["input_ids"].at[0, pos].set(50)
        return float(jnp.abs(apply(params, dict(batch, input_ids=ids))["mlm_logits"]
                             - base).max())

    assert changed_at(4) > 0 and changed_at(11) > 0  # context on both sides is seen
    assert changed_at(13) == 0  # padding is never attended to


@pytest.mark.parametrize("name,low,high", [("bert_base.py", 109e6, 111e6),
                                           ("bert_large.py", 334e6, 341e6)])
def test_published_parameter_counts(name, low, high):
    info = loop.describe(load_config(name))
    assert low < info["params"] < high, info["params"]
    assert info["seq_len"] == 128 and info["phases"][1]["seq_len"] == 512
    assert info["phases"][1]["steps"] == [900_000, 1_000_000]
    assert info["global_batch_size"] * 128 == 256 * 512  # 131,072 tokens a batch in both phases


def test_dropout_masks_do_not_repeat_past_two_to_the_32_elements():
    """RoBERTa-large's attention probabilities (16 heads) at batch 8,192 x 512 hold 2^35
    elements: rows 1,024 apart sit exactly 2^32 positions apart, where a 32-bit index
    wraps (with RoBERTa-base's 12 heads the shared masks fall about 1,365 rows apart)."""
    from pretrainx.models.dropout import index_words, keep_bits
    shape, window = (8192, 16, 512, 512), (1, 1, 4, 512)
    seeds = jnp.array([12345, 67890], jnp.uint32)
    low_a, high_a = index_words(shape, start=(0, 0, 0, 0), window=window)
    low_b, high_b = index_words(shape, start=(1024, 0, 0, 0), window=window)
    assert 1024 * 16 * 512 * 512 == 2 ** 32  # the two windows are 2^32 positions apart
    assert np.array_equal(low_a, low_b)  # the low words collide, as the old index did
    assert not np.array_equal(high_a, high_b)
    a, b = keep_bits(low_a, high_a, seeds), keep_bits(low_b, high_b, seeds)
    threshold = jnp.uint32(int(0.1 * 2 ** 32))
    same_mask = np.mean(np.asarray((a >= threshold) == (b >= threshold)))
    assert same_mask < 0.9  # independent 10% masks agree on ~82% of elements; a repeat on 100%


def test_dropout_masks_of_arrays_under_two_to_the_32_are_those_of_earlier_runs():
    """The fix above leaves every smaller array's mask as it was: resumed runs and
    recorded results keep their numbers."""
    from pretrainx.models.dropout import mix32, index_words, keep_bits
    shape, seeds = (3, 5, 7), jnp.array([7, 11], jnp.uint32)
    position = jnp.arange(3 * 5 * 7, dtype=jnp.uint32).reshape(shape)  # row-major
    low, high = index_words(shape)
    assert high is None and np.array_equal(low, position)
    assert np.array_equal(keep_bits(low, high, seeds),
                          mix32(mix32(position + seeds[0]) ^ seeds[1]))


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16, jnp.float32])
def test_a_fully_masked_row_stays_finite_in_every_dtype(dtype):
    """Padding rows attend to nothing: scores + the mask bias must not round to -inf,
    or softmax gives NaN that spreads through the values (float16's finfo.min did)."""
    from pretrainx.models.layers import mask_to_bias, segment_mask
    segments = jnp.array([[1, 1, 0, 0]])
    bias = mask_to_bias(segment_mask(segments, segments), dtype)
    scores = jnp.full((1, 1, 4, 4), -20.0, dtype)
    probs = jax.nn.softmax(scores + bias, axis=-1)
    assert bool(jnp.isfinite(probs).all())
    np.testing.assert_allclose(np.asarray(probs[0, 0, 0], np.float32), [0.5, 0.5, 0, 0])


@pytest.mark.parametrize("in_dims, features", [(1, (3, 8)), (2, 5)])
def test_dense_contracts_in_place_off_the_cpu_with_the_cpu_forms_values(in_dims, features):
    """Dense is one 2-D matmul on XLA:CPU and one dot_general where a model is traced for
    a TPU or GPU (models/target.py): the same parameters, the same outputs."""
    from pretrainx.models import layers, target
    dense = layers.Dense(features=features, kernel_axes=("a", "b", "c")[:in_dims + (
        len(features) if isinstance(features, tuple) else 1)], in_dims=in_dims)
    x = jax.random.normal(jax.random.key(0), (2, 7, 3, 4)[:2 + in_dims])
    params = dense.init(jax.random.key(1), x)
    on_cpu = dense.apply(params, x)
    with target.targeting("tpu"):
        jaxpr = str(jax.make_jaxpr(lambda v: dense.apply(params, v))(x))
        on_tpu = dense.apply(params, x)
    assert "reshape" not in jaxpr and "dot_general" in jaxpr
    assert "reshape" in str(jax.make_jaxpr(lambda v: dense.apply(params, v))(x))
    np.testing.assert_allclose(np.asarray(on_tpu), np.asarray(on_cpu), rtol=1e-5, atol=1e-5)


def test_layer_norm_statistics_in_one_pass_match_the_centred_ones():
    """LayerNorm's E[x^2] - E[x]^2 against the two-pass variance: on BERT activations
    and on rows whose mean is 30 times their spread (the cancellation's bad case)."""
    from pretrainx.models import layers
    norm = layers.LayerNorm(eps=1e-12)
    x = jax.random.normal(jax.random.key(2), (4, 16, 768)) * jnp.linspace(0.1, 3.0, 768)
    shifted = x[:1] + 30.0
    for v in (x, shifted):
        params = norm.init(jax.random.key(3), v)
        got = norm.apply(params, v)
        mean = v.mean(-1, keepdims=True)
        want = (v - mean) / jnp.sqrt(jnp.square(v - mean).mean(-1, keepdims=True) + 1e-12)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=2e-4)
    zero = norm.apply(params, jnp.full((1, 3, 768), 5.0))  # no variance: finite, zero
    assert np.all(np.asarray(zero) == 0.0)
