"""ModernBERT: the released architecture against transformers' PyTorch model, packed
documents that never see each other, the objective's statistics, StableAdamW and the
trapezoidal schedule, the recipe's sizes, training on real text, fine-tuning, and the
bad input it refuses."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import linen as nn

from cli_fork import run_module
from conftest import (ALICE, REPO, assert_packed_examples_see_only_themselves, load_config,
                      losses_on_one_and_a_mesh, override, read_metrics)
from pretrainx import config as config_lib
from pretrainx import interop, objectives
from pretrainx.data.tokenizers import load_tokenizer
from pretrainx.interop import hf
from pretrainx.errors import UserError
from pretrainx.families.modernbert import model as modernbert
from pretrainx.models import layers
from pretrainx.train import loop, optim, schedules

SPM = str(REPO / "pretrainx" / "assets" / "spm_4k.model")


def _tiny_model(**keys):
    cfg = modernbert.default_config()
    cfg.update(**{**dict(num_layers=4, hidden_size=64, num_heads=4, mlp_dim=96,
                         vocab_size=4096, local_attention=8), **keys})
    return cfg


def _alice_rows(tokenizer, lengths):
    text = open(ALICE, encoding="utf-8").read()
    out, start = [], 4000
    for n in lengths:
        ids = tokenizer.encode(text[start:start + 2000])[:n - 2]
        out.append([tokenizer.cls_id] + ids + [tokenizer.sep_id])
        start += 2500
    return out


def _random_params(model, batch, seed=1):
    """Initial parameters with every norm scale and bias moved off 1 and 0, so that a
    swapped or dropped tensor shows."""
    params = jax.device_get(nn.unbox(jax.jit(model.init)(jax.random.key(seed), batch)["params"]))
    leaves, tree = jax.tree_util.tree_flatten(params)
    rng = np.random.default_rng(seed)
    leaves = [np.asarray(x, np.float32) + (0.1 * rng.standard_normal(x.shape).astype(np.float32)
                                           if x.ndim == 1 else 0) for x in leaves]
    return jax.tree_util.tree_unflatten(tree, leaves)


def _same(a, b):
    return all(np.array_equal(x, y) for x, y in zip(jax.tree_util.tree_leaves(a),
                                                    jax.tree_util.tree_leaves(b)))


@pytest.mark.parametrize("head", ["mlm", "classify"])
def test_matches_transformers_and_round_trips(head, tmp_path):
    """Exported as ModernBertForMaskedLM / ForSequenceClassification: logits within 1e-4
    of transformers' PyTorch model on real text padded in a batch (rows longer than the
    8-token window, so both kinds of layer and RoPE's two bases count), and read back
    bit for bit."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    tokenizer = load_tokenizer(SPM)
    cfg = _tiny_model()
    rows_ = _alice_rows(tokenizer, [40, 29, 13])
    length = max(map(len, rows_))
    ids = np.full((3, length), tokenizer.pad_id, np.int32)
    mask = np.zeros((3, length), np.int32)
    for i, row in enumerate(rows_):
        ids[i, :len(row)], mask[i, :len(row)] = row, 1
    batch = {"input_ids": ids, "attention_mask": mask,
             "masked_lm_positions": np.tile(np.arange(length, dtype=np.int32), (3, 1))}
    if head == "mlm":
        model = modernbert.ModernBertForMaskedLM(cfg)
        labels, hf_class = None, transformers.ModernBertForMaskedLM
    else:
        cfg.classifier_pooling = "mean"
        model = modernbert.ModernBertForFineTuning(cfg, "classify", 3)
        labels, hf_class = ("a", "b", "c"), transformers.ModernBertForSequenceClassification
    params = _random_params(model, batch)
    pretrained = interop.Pretrained(model=cfg, params=params, tokenizer=SPM, lower_case=True,
                                    head=head, source="test", labels=labels)
    hf.save(pretrained, str(tmp_path))
    theirs = hf_class.from_pretrained(tmp_path, attn_implementation="eager").eval()
    with torch.no_grad():
        expected = theirs(input_ids=torch.tensor(ids, dtype=torch.long),
                          attention_mask=torch.tensor(mask)).logits.numpy()
    out = jax.jit(model.apply)({"params": params}, batch)
    if head == "mlm":
        mine = np.asarray(out["mlm_logits"])
        assert np.abs(mine - expected)[mask.astype(bool)].max() <= 1e-4
    else:
        assert np.abs(np.asarray(out["logits"]) - expected).max() <= 1e-4
    back = interop.load(str(tmp_path))
    assert (back.family, back.head) == ("modernbert", head)
    assert back.model.classifier_pooling == cfg.classifier_pooling
    assert _same(back.params, params)
    assert jax.tree_util.tree_structure(back.params) == jax.tree_util.tree_structure(params)


def test_packed_documents_never_see_each_other():
    """Three examples packed in one row (segment ids, positions that restart) give each
    example's logits as it gets alone, within 1e-5: no attention crosses a boundary, in
    the global layers or in the windowed ones."""
    tokenizer = load_tokenizer(SPM)
    cfg = _tiny_model()
    examples = [np.asarray(r, np.int32) for r in _alice_rows(tokenizer, [30, 21, 12])]
    model = modernbert.ModernBertForMaskedLM(cfg)
    n = assert_packed_examples_see_only_themselves(
        model, lambda batch: _random_params(model, batch), examples, 64)
    assert n == 63


def test_the_window_reaches_what_the_paper_says():
    """A local layer's query sees 64 tokens either side at local_attention=128: changing
    the token 65 places away leaves layer 1's output there untouched, 64 places away
    does not (one global layer 0 feeds it, so the check reads layer 1 alone)."""
    cfg = _tiny_model(local_attention=128, num_layers=2)
    layer = modernbert.ModernBertLayer(cfg, jnp.float32, 1)
    x = jax.random.normal(jax.random.key(0), (1, 200, 64))
    ones = jnp.ones((1, 200), jnp.int32)
    segments = layers.Mask(ones, ones)  # the stack's mask; the layer sets its window
    positions = jnp.arange(200)[None]
    # jitted (eagerly, every op compiles alone); `True`: deterministic
    params = jax.jit(layer.init, static_argnums=4)(
        jax.random.key(1), x, segments, positions, True)
    apply = jax.jit(layer.apply, static_argnums=4)
    base = apply(params, x, segments, positions, True)
    for distance, changes in ((65, False), (64, True)):
        bump = jax.random.normal(jax.random.key(2), (64,))  # not a constant: LayerNorm drops it
        moved = apply(params, x.at[0, 100 + distance].add(bump), segments, positions, True)
        assert bool(jnp.any(jnp.abs(moved[0, 100] - base[0, 100]) > 1e-6)) == changes, distance


@pytest.mark.parametrize("size,expected", [("base", 149_655_232), ("large", 395_881_664)])
def test_recipe_sizes_match_the_released_models(size, expected):
    """answerdotai/ModernBERT-base and -large as transformers counts
    ModernBertForMaskedLM (149.7M and 395.9M: the issue's 149M and 395M within 1%), and
    the recipe's schedule in steps of its batch."""
    cfg = load_config("modernbert.py", size)
    info = loop.describe(cfg)
    assert info["params"] == expected
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    m = cfg.model
    with torch.device("meta"):
        theirs = transformers.ModernBertForMaskedLM(transformers.ModernBertConfig(
            num_hidden_layers=m.num_layers, hidden_size=m.hidden_size,
            num_attention_heads=m.num_heads, intermediate_size=m.mlp_dim))
    assert sum(p.numel() for p in theirs.parameters()) == expected
    o = cfg.optimizer
    tokens = cfg.global_batch_size * cfg.seq_len
    assert (o.name, o.schedule, o.b1, o.b2, o.eps) == (
        "stable_adamw", "warmup_stable_decay", 0.9, 0.98, 1e-6)
    assert abs(cfg.total_steps * tokens / 2e12 - 1) < 1e-3  # 2T tokens in all
    phases = config_lib.phases(cfg)  # the release's phases, by their tokens and lengths
    first = {"base": [("pretrain", 1.7e12)], "large": [("pretrain", 900e9),
                                                       ("restart", 800e9)]}[size]
    assert [(p.name, p.seq_len) for p in phases] == [(n, 1024) for n, _ in first] + [
        ("extension", 8192), ("decay", 8192)]
    for p, want in zip(phases, [t for _, t in first] + [250e9, 50e9]):
        assert abs((p.end - p.start) * p.global_batch_size * p.seq_len / want - 1) < 1e-3
    assert phases[0].cfg.model.global_rope_theta == 10_000.0
    assert phases[-2].cfg.model.global_rope_theta == 160_000.0
    assert phases[-2].cfg.optimizer.learning_rate == (3e-4 if size == "base" else 5e-5)
    assert phases[-1].cfg.optimizer.decay_steps == phases[-1].end - phases[-1].start
    assert abs(o.weight_decay * o.learning_rate - 1e-5) < 1e-12
    assert (cfg.data.mask_prob, cfg.model.vocab_size, cfg.seq_len) == (0.30, 50368, 1024)


def test_stable_adamw_clips_each_update_as_the_paper_writes():
    """StableAdamW's step on a tensor is AdamW's divided by max(1, RMS(g^2 / v_hat)):
    equal to AdamW's when the gradient is steady, smaller after a sudden spike, with the
    decoupled decay only on matrices."""
    rng = np.random.default_rng(0)
    params = {"w": jnp.asarray(rng.standard_normal((4, 3)), jnp.float32),
              "bias": jnp.asarray(rng.standard_normal(3), jnp.float32)}
    mask = lambda p: {"w": True, "bias": False}  # noqa: E731
    tx = optim.scale_by_stable_adam(0.9, 0.98, 1e-6, 0.1, mask)
    reference = optax.chain(optax.scale_by_adam(0.9, 0.98, 1e-6),
                            optax.add_decayed_weights(0.1, mask=mask))
    state, ref_state = tx.init(params), reference.init(params)
    b1, b2, m, v = 0.9, 0.98, {k: 0.0 for k in params}, {k: 0.0 for k in params}
    for t in range(1, 6):
        scale = 30.0 if t == 5 else 1.0  # a spike at the last step
        grads = {k: jnp.asarray(scale * rng.standard_normal(p.shape), jnp.float32)
                 for k, p in params.items()}
        ours, state = tx.update(grads, state, params)
        adamw, ref_state = reference.update(grads, ref_state, params)
        for k, g in grads.items():
            g = np.asarray(g, np.float64)
            m[k] = b1 * m[k] + (1 - b1) * g
            v[k] = b2 * v[k] + (1 - b2) * g * g
            v_hat = v[k] / (1 - b2 ** t)
            rms = np.sqrt(np.mean(g * g / np.maximum(v_hat, 1e-12)))
            np.testing.assert_allclose(np.asarray(ours[k]) * max(1.0, rms),
                                       np.asarray(adamw[k]), rtol=2e-5, atol=1e-6)
            if t == 5:
                assert rms > 2  # the spike is clipped
    assert optim.schedule_steps(state) == [] and int(state.count) == 5


def test_warmup_stable_decay_schedule():
    """Warmup to the peak, the peak held, then 1 - sqrt over the last decay_steps."""
    cfg = load_config("modernbert_quickstart.py")
    o = cfg.optimizer
    f = schedules.learning_rate_schedule(o, cfg.total_steps)
    peak, warm, total, decay = o.learning_rate, o.warmup_steps, cfg.total_steps, o.decay_steps
    assert float(f(0)) == 0.0 and abs(float(f(warm // 2)) - peak / 2) < 1e-9
    for step in (warm, (warm + total - decay) // 2, total - decay):
        assert abs(float(f(step)) - peak) < 1e-9, step
    quarter = total - decay + decay // 4
    assert abs(float(f(quarter)) - peak * (1 - np.sqrt(0.25))) < 1e-7
    assert float(f(total)) == 0.0


@pytest.mark.slow
def test_stats_masking_and_packing(tmp_path):
    """--stats: 30% of the non-special tokens masked (80/10/10); packing the books'
    documents' token pieces fills rows over 99% (the paper's packing efficiency), one
    document a row leaves much padding."""
    def stats(*extra):
        out = run_module("pretrainx.data", ["--config=configs/modernbert_quickstart.py",
                                            "--stats", "--num_batches=6", "--show=1", *extra],
                         cwd=REPO)
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr

    packed, shown = stats()
    assert "[MASK]" in shown and "examples)" in shown
    assert abs(packed["masked_fraction"] - 0.30) < 0.01
    assert abs(packed["mask_token_fraction"] - 0.8) < 0.03
    assert abs(packed["random_token_fraction"] - 0.1) < 0.03
    unpacked, _ = stats("--config.data.pack_examples=False")
    assert unpacked["examples_per_row"] == 1.0
    assert packed["padding_fraction"] < 0.01 < unpacked["padding_fraction"], (packed, unpacked)


def _quick(**overrides):
    c = load_config("modernbert_quickstart.py")
    return override(c, {"total_steps": 12, "log_every": 1, "eval_every": 1000,
                        "checkpoint_every": 12, "global_batch_size": 8, "seq_len": 64,
                        "data.max_predictions_per_seq": 20, "optimizer.warmup_steps": 2,
                        "optimizer.decay_steps": 4, "model.local_attention": 16,
                        "data.train_files": ALICE, "data.eval_files": "", **overrides})


@pytest.mark.slow
def test_loss_falls_sharded_equals_unsharded_and_glue_finetunes(shared_data, tmp_path):
    """12 steps on Alice: the loss falls from log(4096), a (data 2, fsdp 2, tensor 2)
    mesh gives the single device's losses, and the run fine-tunes on SST-2 with the MLM
    head's dense + norm under the classifier (as transformers starts one)."""
    from pretrainx.finetune import loop as finetune_loop
    from pretrainx.finetune.config import finetune_config
    one = str(tmp_path / "one")
    a, b = losses_on_one_and_a_mesh(_quick, tmp_path)
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
    assert a[0] > 7.5 and np.mean(a[-3:]) < a[0] - 1.0, a
    pretrained = interop.load(one)
    assert (pretrained.family, pretrained.head) == ("modernbert", "mlm")
    cfg = finetune_config()
    cfg.update_from_flattened_dict({
        "init_from": one, "task": "sst2", "data.glue_dir": str(shared_data / "glue"),
        "seq_len": 64, "global_batch_size": 16, "epochs": 1, "data.max_train_examples": 64,
        "data.max_eval_examples": 32})
    out = finetune_loop.train(cfg, str(tmp_path / "ft"), devices=jax.devices()[:1])
    losses = [r["loss"] for r in read_metrics(tmp_path / "ft") if "loss" in r]
    assert losses and np.isfinite(losses).all() and 0 <= out["best"]["accuracy"] <= 1
    tuned = interop.load(str(tmp_path / "ft"))
    assert (tuned.family, tuned.head) == ("modernbert", "classify")
    np.testing.assert_array_equal(  # embeddings moved from the pretrained ones, same shape
        np.shape(tuned.params["model"]["token_embed"]["embedding"]), (4096, 128))


@pytest.mark.parametrize("key,value,words", [
    ("model.attention_impl", "flash", "no sliding window"),
    ("model.local_attention", 7, "even window"),
    ("optimizer.decay_steps", 5000, "decay_steps=5000"),
    ("data.max_predictions_per_seq", 10, "by more than 10%"),
])
def test_bad_input_is_one_line(key, value, words):
    from pretrainx.models import target
    cfg = override(load_config("modernbert_quickstart.py"), {key: value})
    with pytest.raises(UserError) as err, target.targeting("tpu"):  # flash: a TPU's kernel
        objectives.validate(cfg)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_phase_bounds_the_predictions():
    """The quickstart's 40 predictions hold 30% of its 126 maskable tokens."""
    cfg = load_config("modernbert_quickstart.py")
    phase = config_lib.phases(cfg)[0]
    assert phase.max_predictions >= 0.3 * (phase.seq_len - 2)
