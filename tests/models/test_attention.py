"""model.attention_impl: Pallas's TPU kernels (flash, splash), run in Pallas's interpret
mode on this CPU, give XLA's outputs and gradients on packed, padded, causal, cross and
biased attention; families reach them through one dispatch; "auto" is XLA here; what a
kernel cannot do is refused in one line."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pretrainx.errors import UserError
from pretrainx.models import attention, target

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
    b, h, d = 2, 2, 64
    lq, lk = {"cross": (128, 256), "ragged": (100, 70)}.get(name, (128, 128))
    q, k, v = (jnp.asarray(rng.normal(size=(b, h, n, d)), jnp.float32)
               for n in (lq, lk, lk))
    q = q * d ** -0.5
    if name == "ragged":  # lengths off the kernels' 128 tiles: attend pads them
        return q, k, v, attention.Mask(_segments(b, lq, (40, 60), (90, 100)),
                                       _segments(b, lk, (30, 50), (60, 70)))
    seg_q = _segments(b, lq, (60, 90), (110, 128))
    if name == "cross":  # decoder rows reading their own example's encoder rows
        mask = attention.Mask(seg_q, _segments(b, lk, (100, 180), (240, 200)))
    elif name == "causal":
        mask = attention.Mask(seg_q, seg_q, causal=True)
    elif name == "window":  # ModernBERT's local layers: 16 keys either side, packed
        mask = attention.Mask(seg_q, seg_q, window=16)
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


@pytest.mark.parametrize("name", ["cross", "bias", "ragged"])
def test_flash_gives_xlas_outputs_and_gradients(name):
    """Cross attention of 128 queries to 256 keys, two packed examples and padding per
    row under a causal mask with an additive bias whose gradient the kernel returns
    too, and 100 queries to 70 keys (padded to the 128 tile): float32 within 1e-5.
    (Packed and causal without a bias: splash's cases, the same segment-id path.)"""
    _compare("flash", name)


@pytest.mark.parametrize("name", ["packed", "causal", "cross", "ragged", "window"])
def test_splash_gives_xlas_outputs_and_gradients(name):
    _compare("splash", name)


def test_what_a_kernel_cannot_do_is_refused_in_one_line():
    """Splash with T5's bias; another backend's kernel; attention dropout, which no
    kernel applies; a head size cuDNN lacks; an unknown name."""
    from pretrainx.families.bert import model as bert
    q, k, v, mask = _case("bias")
    with pytest.raises(ValueError, match="no additive bias"):
        attention.attend("splash", q, k, v, mask)
    cfg = bert.default_config()

    def refused(impl, backend, match, **model):
        c = cfg.copy_and_resolve_references()
        c.update(attention_impl=impl, **model)
        with target.targeting(backend), pytest.raises(UserError, match=match):
            attention.validate(c)

    refused("splash", "cpu", "runs on TPUs; this run's backend is cpu", attention_dropout_rate=0.0)
    refused("flash", "gpu", "runs on TPUs; this run's backend is gpu", attention_dropout_rate=0.0)
    refused("cudnn", "tpu", "runs on GPUs; this run's backend is tpu", attention_dropout_rate=0.0)
    refused("flash", "tpu", r"set model.attention_dropout_rate=0 \(it is 0.1\)")
    refused("cudnn", "gpu", "multiple of 8 .* this model's is 10", attention_dropout_rate=0.0,
            hidden_size=40, num_heads=4)
    refused("fused", "tpu", "'model.attention_impl' is 'fused'; expected one of")
    from pretrainx.families.t5 import model as t5  # one dropout rate, attention included
    t5_cfg = t5.default_config()
    t5_cfg.update(attention_impl="flash", dropout_rate=0.1)
    with target.targeting("tpu"), pytest.raises(UserError, match="model.dropout_rate=0"):
        attention.validate(t5_cfg)
    accepted = cfg.copy_and_resolve_references()
    accepted.update(attention_impl="splash", attention_dropout_rate=0.0)
    with target.targeting("tpu"):
        attention.validate(accepted)


def test_auto_picks_per_backend_dropout_and_dtype():
    """xla on CPU and wherever attention dropout is on; on a TPU splash, or flash where
    a bias is added (T5); on a GPU cuDNN in 16 bits, xla in float32."""
    assert attention.choose("auto", has_bias=False, dropout=False) == "xla"  # this CPU
    with target.targeting("tpu"):
        assert attention.choose("auto", False, False) == "splash"
        assert attention.choose("auto", True, False) == "flash"
        assert attention.choose("auto", False, True) == "xla"
    with target.targeting("gpu"):
        assert attention.choose("auto", True, False, jnp.bfloat16) == "cudnn"
        assert attention.choose("auto", False, False, jnp.float32) == "xla"
    assert attention.choose("flash", False, True) == "flash"  # explicit: as given


def test_the_cudnn_path_lays_out_and_masks_as_xla():
    """The cuDNN call is jax.nn.dot_product_attention in its [batch, length, heads, dim]
    layout with the mask as a boolean and T5's positions as the bias; with XLA's
    implementation of that function (no GPU here) it gives our reference."""
    for name in ("packed", "bias", "cross", "window"):
        q, k, v, mask = _case(name)
        real = (mask.q_segments > 0)[:, None, :, None]
        out = attention._fused(q, k, v, mask, "xla")
        np.testing.assert_allclose(np.asarray(jnp.where(real, out, 0)),
                                   np.asarray(jnp.where(real, _xla(q, k, v, mask), 0)),
                                   atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["t5"])  # causal, biased and cross; packed in both stacks
def test_a_family_through_the_kernel_gives_its_xla_logits(family):
    """A packed batch through a 2-layer model with attention_impl=flash (interpret mode)
    gives the logits of attention_impl=xla on every real token, and the same gradients:
    the families reach the kernel through MultiHeadAttention's one dispatch."""
    from flax import linen as nn
    from pretrainx.families.bert import model as bert
    from pretrainx.families.gpt2 import model as gpt2
    from pretrainx.families.t5 import model as t5
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
    target = jnp.asarray(np.random.default_rng(4).normal(size=(2, 128, 512)), jnp.float32)
    project = lambda out: out * target[..., :out.shape[-1]]  # noqa: E731  (states or logits)

    def run(impl):
        cfg.attention_impl = impl
        m = build(cfg)
        out = jax.jit(lambda p: call(m, p))(params)  # jitted: eager interpretation crawls
        grads = jax.jit(jax.grad(  # a fixed random projection of the real tokens' logits
            lambda p: jnp.sum(jnp.where(real[..., None], project(call(m, p)), 0))))(params)
        return np.asarray(out)[real], grads

    with pltpu.force_tpu_interpret_mode():
        kernel_out, kernel_grads = run("flash")
    xla_out, xla_grads = run("xla")
    np.testing.assert_allclose(kernel_out, xla_out, atol=2e-5, rtol=1e-5)
    scale = max(float(np.max(np.abs(np.asarray(g)))) for g in jax.tree.leaves(xla_grads))
    for (path, a), (_, b) in zip(jax.tree_util.tree_leaves_with_path(kernel_grads),
                                 jax.tree_util.tree_leaves_with_path(xla_grads)):
        # float32 sums in another order: within 1e-5 of the largest gradient (measured
        # 2.4e-7 to 5.6e-7 of it for BERT, GPT-2 and T5)
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5 * scale, rtol=0,
                                   err_msg=str(path))


def test_a_shared_bias_gets_the_gradient_of_a_plain_broadcast_add():
    """plus_shared (T5's position bias, one for the batch) sums its gradient over the
    batch with a matrix-vector product; it is the gradient of `shared + per_row`, for
    both arguments, and a per-row `shared` passes through unsummed."""
    from pretrainx.models.attention import plus_shared
    rng = np.random.default_rng(0)
    for shared_shape in ((1, 3, 5, 7), (4, 3, 5, 7)):
        shared = jnp.asarray(rng.normal(size=shared_shape), jnp.float32)
        per_row = jnp.asarray(rng.normal(size=(4, 1, 5, 7)), jnp.float32)
        weights = jnp.asarray(rng.normal(size=(4, 3, 5, 7)), jnp.float32)
        ours = jax.grad(lambda a, b: jnp.sum(plus_shared(a, b) ** 2 * weights), (0, 1))
        plain = jax.grad(lambda a, b: jnp.sum((a + b) ** 2 * weights), (0, 1))
        for got, want in zip(ours(shared, per_row), plain(shared, per_row)):
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
