"""model.attention_impl: Pallas's TPU kernels (flash, splash), run in Pallas's interpret
mode on this CPU, give XLA's outputs and gradients on packed, padded, causal, cross and
biased attention; families reach them through one dispatch; "auto" is XLA here; what a
kernel cannot do is refused in one line."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pretrainx.errors import UserError
from pretrainx.models import attention

pltpu = pytest.importorskip("jax.experimental.pallas.tpu")


def _segments(batch, length, cuts, pad_from):
    """Packed rows: segment 1 up to cuts[r], 2 after, 0 (padding) from pad_from[r]."""
    seg = np.ones((batch, length), np.int32)
    for r in range(batch):
        seg[r, cuts[r]:] = 2
        seg[r, pad_from[r]:] = 0
    return jnp.asarray(seg)


def _xla(q, k, v, mask):
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) + mask.dense(jnp.float32)
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, axis=-1), v)


def _case(name, seed=0):
    """(q, k, v, mask) of a case, q pre-scaled as MultiHeadAttention scales it."""
    rng = np.random.default_rng(seed)
    b, h, d, lq = 2, 2, 64, 128
    lk = 256 if name == "cross" else lq
    q, k, v = (jnp.asarray(rng.normal(size=(b, h, n, d)), jnp.float32)
               for n in (lq, lk, lk))
    q = q * d ** -0.5
    seg_q = _segments(b, lq, (60, 90), (110, 128))
    if name == "cross":  # decoder rows reading their own example's encoder rows
        mask = attention.Mask(seg_q, _segments(b, lk, (100, 180), (240, 200)))
    elif name == "causal":
        mask = attention.Mask(seg_q, seg_q, causal=True)
    elif name == "bias":  # T5's relative positions: one bias per head, shared by rows
        mask = attention.Mask(seg_q, seg_q, causal=True, extra=jnp.asarray(
            rng.normal(size=(1, h, lq, lq)), jnp.float32))
    else:
        mask = attention.Mask(seg_q, seg_q)
    return q, k, v, mask


def _compare(impl, name):
    q, k, v, mask = _case(name)
    real = (mask.q_segments > 0)[:, None, :, None].astype(jnp.float32)
    target = jnp.asarray(np.random.default_rng(1).normal(size=q.shape), jnp.float32)

    def loss(fn, q, k, v, extra):  # only real query rows carry a loss, as in training
        m = mask.replace(extra=extra)
        return jnp.sum(real * fn(q, k, v, m) * target)

    extra = mask.extra
    with pltpu.force_tpu_interpret_mode():
        ours = attention.attend(impl, q, k, v, mask)
        grads = jax.grad(lambda *a: loss(lambda *b: attention.attend(impl, *b), *a),
                         argnums=(0, 1, 2, 3) if extra is not None else (0, 1, 2))(
            q, k, v, extra)
    ref = _xla(q, k, v, mask)
    ref_grads = jax.grad(lambda *a: loss(_xla, *a),
                         argnums=(0, 1, 2, 3) if extra is not None else (0, 1, 2))(
        q, k, v, extra)
    np.testing.assert_allclose(np.asarray(ours * real), np.asarray(ref * real), atol=1e-5)
    for got, want in zip(grads, ref_grads):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5)


@pytest.mark.parametrize("name", ["packed", "causal", "cross", "bias"])
def test_flash_gives_xlas_outputs_and_gradients(name):
    """Two packed examples and padding per row (segment ids into the kernel), causal
    masks, cross attention of 128 queries to 256 keys, and an additive bias whose
    gradient the kernel returns too: float32 within 1e-5."""
    _compare("flash", name)


@pytest.mark.parametrize("name", ["packed", "causal", "cross"])
def test_splash_gives_xlas_outputs_and_gradients(name):
    _compare("splash", name)


def test_splash_refuses_a_bias_and_the_kernels_refuse_attention_dropout():
    q, k, v, mask = _case("bias")
    with pytest.raises(ValueError, match="no additive bias"):
        attention.attend("splash", q, k, v, mask)
    from pretrainx.models import bert
    cfg = bert.default_config()
    cfg.attention_impl = "flash"
    with pytest.raises(UserError, match="attention_dropout_rate=0"):
        attention.validate(cfg)
    cfg.attention_impl = "fused"
    with pytest.raises(UserError, match="'model.attention_impl' is 'fused'"):
        attention.validate(cfg)
    assert attention.choose("auto", has_bias=True, dropout=False) == "xla"  # on CPU


def test_the_cudnn_path_lays_out_and_masks_as_xla():
    """The cuDNN call is jax.nn.dot_product_attention in its [batch, length, heads, dim]
    layout with the mask as a boolean and T5's positions as the bias; with XLA's
    implementation of that function (no GPU here) it gives our reference."""
    for name in ("packed", "bias", "cross"):
        q, k, v, mask = _case(name)
        real = (mask.q_segments > 0)[:, None, :, None]
        out = attention._fused(q, k, v, mask, "xla")
        np.testing.assert_allclose(np.asarray(jnp.where(real, out, 0)),
                                   np.asarray(jnp.where(real, _xla(q, k, v, mask), 0)),
                                   atol=1e-5)


@pytest.mark.parametrize("family", ["bert", "gpt2", "t5"])
def test_a_family_through_the_kernel_gives_its_xla_logits(family):
    """A packed batch through a 2-layer model with attention_impl=flash (interpret mode)
    gives the logits of attention_impl=xla on every real token, and the same gradients:
    the families reach the kernel through MultiHeadAttention's one dispatch."""
    from flax import linen as nn
    from pretrainx.models import bert, gpt2, t5
    seg = _segments(2, 128, (50, 80), (120, 128))
    tokens = jnp.asarray(np.random.default_rng(3).integers(5, 500, (2, 128)), jnp.int32)
    if family == "bert":
        cfg = bert.default_config()
        batch = {"input_ids": tokens, "token_type_ids": jnp.zeros_like(tokens),
                 "attention_mask": seg}
        build = lambda c: bert.BertEncoder(c)  # noqa: E731
        call = lambda m, p: m.apply({"params": p}, tokens, batch["token_type_ids"], seg,  # noqa
                                    True)
    elif family == "gpt2":
        cfg = gpt2.default_config()
        positions = jnp.broadcast_to(jnp.arange(128), tokens.shape)
        batch = {"inputs": tokens, "segment_ids": seg, "positions": positions}
        build = lambda c: gpt2.GPT2(c)  # noqa: E731
        call = lambda m, p: m.apply({"params": p}, batch)["logits"]  # noqa: E731
    else:
        cfg = t5.default_config()
        batch = {"encoder_input_tokens": tokens, "encoder_segment_ids": seg,
                 "decoder_input_tokens": tokens, "decoder_target_tokens": tokens,
                 "decoder_segment_ids": seg, "decoder_loss_weights": seg > 0}
        build = lambda c: t5.T5(c)  # noqa: E731
        call = lambda m, p: m.apply({"params": p}, batch)["logits"]  # noqa: E731
    cfg.update(num_layers=2, hidden_size=128, num_heads=2, mlp_dim=256, vocab_size=512,
               dropout_rate=0.0)
    if "attention_dropout_rate" in cfg:
        cfg.attention_dropout_rate = 0.0
    if "num_decoder_layers" in cfg:
        cfg.update(num_decoder_layers=2, head_dim=64)
    if "max_position_embeddings" in cfg:
        cfg.max_position_embeddings = 128
    model = build(cfg)
    init_batch = (tokens, batch["token_type_ids"], seg, True) if family == "bert" else (batch,)
    params = nn.unbox(model.init(jax.random.key(0), *init_batch)["params"])
    real = np.asarray(seg > 0)

    def run(impl):
        cfg.attention_impl = impl
        m = build(cfg)
        out = call(m, params)
        grads = jax.grad(lambda p: jnp.sum(jnp.where(real[..., None], call(m, p), 0) ** 2))(
            params)
        return np.asarray(out)[real], grads

    with pltpu.force_tpu_interpret_mode():
        kernel_out, kernel_grads = run("flash")
    xla_out, xla_grads = run("xla")
    np.testing.assert_allclose(kernel_out, xla_out, atol=2e-5, rtol=1e-5)
    for (path, a), (_, b) in zip(jax.tree_util.tree_leaves_with_path(kernel_grads),
                                 jax.tree_util.tree_leaves_with_path(xla_grads)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-4, rtol=1e-4,
                                   err_msg=str(path))
