"""PrefixLM for decoders (gpt2_prefixlm, qwen3_prefixlm, gemma3_prefixlm, and Ettin's
modernbert_prefixlm): the mask lets
a prefix see itself both ways and keeps what follows causal, never across documents; in
each decoder a change after a position reaches it only from inside its prefix; on the
books' rows the split is uniform, no target lies in a prefix, and the loss falls; bad
input in one line."""

import types

import jax
import numpy as np
import pytest

from conftest import load_config, override, read_metrics, saved_params
from pretrainx import objectives
from pretrainx.errors import UserError
from pretrainx.models import attention
from pretrainx.objectives import prefix_lm
from pretrainx.train import loop

TINY = {"total_steps": 40, "global_batch_size": 8, "seq_len": 32, "log_every": 10,
        "eval_every": 40, "eval_steps": 2, "checkpoint_every": 40, "model.num_layers": 1,
        "model.hidden_size": 32, "model.num_heads": 2, "model.mlp_dim": 64,
        "optimizer.warmup_steps": 4}
SHAPES = {"gpt2": ("gpt2.py", "small", {}),
          "qwen3": ("qwen3.py", "quickstart", {"model.num_kv_heads": 1, "model.head_dim": 16}),
          "gemma3": ("gemma3.py", "quickstart", {"model.head_dim": 16,
                                                 "model.query_pre_attn_scalar": 16,
                                                 "model.sliding_window": 64}),
          "modernbert": ("ettin_quickstart.py", "decoder", {})}


def _config(family, **keys):
    """The family's model of `SHAPES`, shrunk, on the Gemma 3 quickstart's books and
    vocabulary (the bundled novels)."""
    name, arg, shape = SHAPES[family]
    books = load_config("gemma3.py", "quickstart").data
    cfg = objectives.get(f"{family}_prefixlm").defaults()
    cfg.model = load_config(name, arg).model
    cfg.data.update(train_files=books.train_files, eval_files=books.eval_files,
                    tokenizer=books.tokenizer, lower_case=books.lower_case)
    return override(cfg, {**TINY, **shape, **keys})


def test_mask_prefix_both_ways_then_causal_inside_documents():
    segments = np.array([[1, 1, 1, 1, 2, 2, 2, 0]])
    prefix = np.array([[1, 1, 0, 0, 1, 0, 0, 0]], bool)
    allowed = np.asarray(attention.segment_mask(segments, segments, True,
                                                kv_prefix=prefix))[0, 0]
    expected = np.array([  # rows: queries; columns: keys
        [1, 1, 0, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0, 0, 0],
        [1, 1, 1, 1, 0, 0, 0, 0],
        [0, 0, 0, 0, 1, 0, 0, 0],
        [0, 0, 0, 0, 1, 1, 0, 0],
        [0, 0, 0, 0, 1, 1, 1, 0],
        [0, 0, 0, 0, 0, 0, 0, 0]], bool)
    np.testing.assert_array_equal(allowed, expected)


@pytest.mark.parametrize("family", list(SHAPES))
def test_each_decoder_reads_a_prefix_both_ways_and_the_rest_causally(family):
    """Changing token j changes position i's logits exactly when j <= i or both lie in
    i's prefix, and never another document's."""
    cfg = _config(family)
    objective = objectives.build(cfg, None)
    net = objective.model
    length = 12
    segments = np.array([[1] * 8 + [2] * 4])
    prefix = np.array([[1] * 5 + [0] * 3 + [1, 1, 0, 0]], np.int32)
    positions = np.array([list(range(8)) + list(range(4))])
    rng = np.random.default_rng(0)
    tokens = rng.integers(5, 200, (1, length)).astype(np.int32)
    batch = {"inputs": tokens, "segment_ids": segments, "positions": positions,
             "prefix": prefix}
    params = jax.jit(net.init)(jax.random.key(0), batch)["params"]
    apply = jax.jit(lambda b: net.apply({"params": params}, b)["logits"][0])
    base = np.asarray(apply(batch))
    for j in range(length):
        changed = tokens.copy()
        changed[0, j] = (changed[0, j] + 7) % 200 + 5
        moved = np.abs(np.asarray(apply(dict(batch, inputs=changed))) - base).max(-1) > 1e-6
        for i in range(length):
            same_doc = segments[0, i] == segments[0, j]
            sees = same_doc and (j <= i or (prefix[0, j] and prefix[0, i]))
            assert moved[i] == sees, (family, i, j)


def test_rows_split_uniformly_and_no_target_lies_in_a_prefix():
    cfg = _config("gemma3")
    tok, objective = objectives.for_run(cfg)
    phase = types.SimpleNamespace(seq_len=cfg.seq_len, global_batch_size=8, index=0)
    rows = objective.examples(cfg.data.train_files, phase, train=True)[:400]
    plain = super(prefix_lm.Prefixed, objective).transform(phase, True)
    split = objective.transform(phase, True)
    shares, kept = [], 0
    for i, row in enumerate(rows):
        before, after = plain(row, np.random.default_rng(i)), split(row, np.random.default_rng(i))
        seg, pre, w = after["segment_ids"], after["prefix"] > 0, after["loss_weights"] > 0
        np.testing.assert_array_equal(after["inputs"], before["inputs"])
        assert not (w[:-1] & pre[1:]).any()  # every target follows its prefix
        assert not (w & ~(before["loss_weights"] > 0)).any()
        for s in range(1, seg.max() + 1):
            n = int((seg == s).sum())
            p = int((pre & (seg == s)).sum())
            if n >= 2:
                assert 1 <= p <= n - 1
                # the prefix is the segment's first p tokens
                assert pre[seg == s][:p].all() and not pre[seg == s][p:].any()
                shares.append(p / n)
        kept += w.sum()
    assert len(shares) > 300 and kept > 0
    assert abs(np.mean(shares) - 0.5) < 0.05


def _ettin(**keys):
    """Ettin's decoder quickstart, shrunk, as a prefix LM on its own rows."""
    return override(load_config("ettin_quickstart.py", "decoder"), {
        "objective": "modernbert_prefixlm", **TINY, "model.local_attention": 8,
        "model.num_layers": 2, "data.max_predictions_per_seq": 10, "optimizer.decay_steps": 10,
        **keys})


def test_ettin_rows_split_each_example_and_weigh_only_what_follows():
    """Ettin's packed [CLS] text [SEP] rows: each example's prefix is its first p tokens,
    p uniform in [1, n - 1]; the weights keep a next-token target only after the prefix
    and inside its example."""
    cfg = _ettin()
    tok, objective = objectives.for_run(cfg)
    phase = types.SimpleNamespace(seq_len=cfg.seq_len, global_batch_size=8, index=0)
    rows = objective.examples(cfg.data.train_files, phase, train=True)[:300]
    split = objective.transform(phase, True)
    shares = []
    for i, row in enumerate(rows):
        out = split(row, np.random.default_rng(i))
        seg, pre = out["attention_mask"], out["prefix"] > 0
        _, w = objective._weights({k: v[None] for k, v in out.items()})
        w = np.asarray(w[0]) > 0
        assert not (w & pre[1:]).any() and not (w & (seg[1:] != seg[:-1])).any()
        for s in range(1, seg.max() + 1):
            n, p = int((seg == s).sum()), int((pre & (seg == s)).sum())
            if n >= 2:
                assert pre[seg == s][:p].all() and not pre[seg == s][p:].any()
                assert w[(seg == s)[:-1]].sum() == n - p  # targets p .. n-1
                shares.append(p / n)
    assert len(shares) > 200 and abs(np.mean(shares) - 0.5) < 0.05


def test_ettin_prefixlm_loss_falls_on_real_text(tmp_path):
    cfg = _ettin(**{"optimizer.learning_rate": 3e-3, "model.scan_layers": True})
    result = loop.train(cfg, str(tmp_path), devices=jax.devices()[:1])
    losses = [r["loss"] for r in read_metrics(tmp_path)]
    assert losses[-1] < losses[0] - 1.0, losses
    assert np.isfinite(result["eval"]["loss"])
    with pytest.raises(UserError, match="attention_impl=splash has no PrefixLM mask"):
        objectives.get("modernbert_prefixlm").validate(
            _ettin(**{"model.attention_impl": "splash"}))


@pytest.mark.parametrize("family", ["gemma3", "modernbert"])
def test_a_prefix_lm_writes_after_its_prompt_read_both_ways(family):
    """sampling.generate_prefixed (what python -m pretrainx.generate runs for a
    `<family>_prefixlm` run): each greedy token is the argmax of the network reading
    the prompt as its prefix and what it wrote causally, the row unpadded; and the
    prompt's tokens see each other (a later one moves the first's state)."""
    from pretrainx.trained import sampling
    cfg = _config(family)
    net = objectives.get(f"{family}_prefixlm").build(cfg, None).model
    prompt = [2, 17, 41, 99, 8]
    row = lambda ids, p: {  # noqa: E731
        "inputs": np.asarray([ids], np.int32), "segment_ids": np.ones((1, len(ids)), np.int32),
        "positions": np.arange(len(ids))[None], "prefix": np.asarray([[1] * p + [0] * (
            len(ids) - p)], np.int32)}
    params = jax.jit(net.init)(jax.random.key(0), row(prompt, 5))["params"]
    from flax import linen as nn
    params = nn.unbox(params)
    wrote = sampling.generate_prefixed(cfg.model, params, prompt, 4, temperature=0.0)[0]
    ids = list(prompt)
    for token in wrote:
        logits = np.asarray(net.apply({"params": params}, row(ids, len(prompt)))["logits"])
        assert token == int(np.argmax(logits[0, -1]))
        ids.append(int(token))
    def first(ids):  # the first prompt token's logits
        return np.asarray(net.apply({"params": params}, row(ids, 5))["logits"][0, 0])
    assert np.abs(first(prompt) - first(prompt[:4] + [77])).max() > 1e-6


def test_gpt2_prefixlm_loss_falls_on_real_text(tmp_path):
    cfg = _config("gpt2", **{"optimizer.learning_rate": 3e-3})
    result = loop.train(cfg, str(tmp_path), devices=jax.devices()[:1])
    losses = [r["loss"] for r in read_metrics(tmp_path)]
    assert losses[-1] < losses[0] - 1.0, losses
    assert np.isfinite(result["eval"]["loss"])


def test_bad_input_in_one_line():
    with pytest.raises(UserError, match="gemma3_prefixlm attends causally"):
        objectives.get("gemma3_prefixlm").validate(_config("gemma3", **{"model.causal": False}))
    with pytest.raises(UserError, match="model.attention_impl=splash has no PrefixLM mask"):
        objectives.get("qwen3_prefixlm").validate(
            _config("qwen3", **{"model.attention_impl": "splash"}))


@pytest.mark.slow
def test_distilled_from_a_frozen_teacher_decoder(tmp_path):
    """A Gemma 3 decoder trained causally teaches a PrefixLM student: the loss is
    (1 - alpha) CE + alpha KL at every step, the KL falls, the teacher never moves, and
    the finished run reads as the student alone."""
    from pretrainx import pretrain
    from pretrainx import interop
    teacher_cfg = override(load_config("gemma3.py", "quickstart"),
                           {**TINY, **SHAPES["gemma3"][2], "total_steps": 30,
                            "checkpoint_every": 30, "eval_every": 30})
    pretrain.train(teacher_cfg, str(tmp_path / "teacher"))
    cfg = _config("gemma3", **{"distill.teacher": str(tmp_path / "teacher"),
                               "distill.alpha": 0.25, "distill.temperature": 2.0,
                               "total_steps": 20, "log_every": 1, "eval_every": 20,
                               "checkpoint_every": 20})
    pretrain.train(cfg, str(tmp_path / "student"))
    rows = read_metrics(tmp_path / "student")
    for r in rows:
        assert r["loss"] == pytest.approx(0.75 * r["cross_entropy"] + 0.25 * r["kl"], rel=1e-4)
    assert np.mean([r["kl"] for r in rows[-5:]]) < np.mean([r["kl"] for r in rows[:5]])
    assert "kl" in read_metrics(tmp_path / "student", "eval")[-1]
    # python -m pretrainx.evaluate loads the teacher the checkpoint holds beside it
    import contextlib
    import io
    import json
    from pretrainx.evaluate import heldout
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert heldout.main([f"--workdir={tmp_path / 'student'}", "--eval_steps=1"]) == 0
    assert "kl" in json.loads(printed.getvalue().strip().splitlines()[-1])["eval"]
    student = interop.load(str(tmp_path / "student"))
    assert "teacher" not in student.params and "layer_0" in student.params
    from flax import traverse_util
    saved = {k[1:]: v for k, v in saved_params(tmp_path / "student").items()
             if k[0] == "teacher"}
    taught = traverse_util.flatten_dict(interop.load(str(tmp_path / "teacher")).params)
    assert saved.keys() == taught.keys()
    for key, value in taught.items():  # frozen: bit for bit the teacher it started from
        np.testing.assert_array_equal(np.asarray(saved[key]), np.asarray(value))


def test_a_teacher_of_another_vocabulary_is_refused(tmp_path):
    from pretrainx import pretrain
    teacher_cfg = override(load_config("gemma3.py", "quickstart"),
                           {**TINY, **SHAPES["gemma3"][2], "total_steps": 1,
                            "checkpoint_every": 1, "eval_every": 1})
    pretrain.train(teacher_cfg, str(tmp_path / "teacher"))
    cfg = _config("gemma3", **{"distill.teacher": str(tmp_path / "teacher"),
                               "model.vocab_size": teacher_cfg.model.vocab_size + 128})
    with pytest.raises(UserError, match="must share a vocabulary"):
        pretrain.train(cfg, str(tmp_path / "student"))
    with pytest.raises(UserError, match="distill.alpha=1.5 must be in"):
        objectives.get("gemma3_prefixlm").validate(_config("gemma3", **{"distill.alpha": 1.5}))
