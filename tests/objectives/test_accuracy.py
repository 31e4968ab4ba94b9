"""Top-1 accuracy from plain maxima (objectives/accuracy.py) is argmax's, ties included."""

import jax
import jax.numpy as jnp
import numpy as np

from pretrainx.objectives import accuracy


def test_matches_argmax_on_ties_infinities_and_any_shape():
    """Logits drawn from {0, 1, 2, -inf} tie on nearly every row; some rows are all
    -inf; targets include 0 and the last word. Every answer equals argmax == target,
    in float32 and bfloat16, for [rows, vocab] and [batch, length, vocab]."""
    rng = np.random.default_rng(0)
    logits = rng.integers(0, 3, (4, 50, 9)).astype(np.float32)
    logits[rng.random(logits.shape) < 0.25] = -np.inf
    logits[0, :6] = -np.inf
    targets = rng.integers(0, 9, (4, 50))
    targets[:, :5], targets[:, 5:10] = 0, 8
    first = np.argmax(logits, -1)  # numpy's argmax: the first maximum too
    last = logits.shape[-1] - 1 - np.argmax(logits[..., ::-1], -1)
    targets[:, 10:30], targets[:, 30:40] = first[:, 10:30], last[:, 30:40]
    assert (last[:, 30:40] != first[:, 30:40]).sum() > 10  # later tied maxima lose
    matches = jax.jit(accuracy.argmax_matches)
    for dtype in (jnp.float32, jnp.bfloat16):
        x = jnp.asarray(logits, dtype)
        expected = np.asarray(jnp.argmax(x, -1) == targets)
        assert 0.3 < expected.mean() < 0.7  # both answers are common
        np.testing.assert_array_equal(np.asarray(matches(x, targets)), expected)
        np.testing.assert_array_equal(np.asarray(matches(x[1], targets[1])), expected[1])


def test_a_nan_target_logit_is_wrong():
    logits = jnp.asarray([[1.0, jnp.nan, 0.0], [jnp.nan, 2.0, 3.0]])
    assert np.asarray(accuracy.argmax_matches(logits, jnp.asarray([1, 2]))).tolist() == [
        False, False]
