"""T5: span corruption as T5 defines it, packing that leaks nothing, the model
against HuggingFace's, and the train loop (sharding, resume, learning)."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cli_fork import run_module
from conftest import REPO, load_config, read_metrics, tiny_t5_config
from pretrainx.data import packing, sources
from pretrainx.data.tokenizers import load_tokenizer
from pretrainx.families.t5 import model as t5
from pretrainx.models import relative
from pretrainx.objectives import spans
from pretrainx.train import loop

SPM = REPO / "pretrainx" / "assets" / "spm_t5_4k.model"


# ---- span corruption ------------------------------------------------------------

def test_random_spans_helper_gives_t5_lengths():
    assert spans.random_spans_helper(512, 0.15, 3.0) == (568, 114)
    assert spans.random_spans_helper(128, 0.15, 3.0) == (141, 29)


@pytest.fixture(scope="module")
def real_tokens(shared_data):
    """Tokens of two books from the shared corpus that the bundled vocabulary never saw."""
    tok = load_tokenizer(str(SPM))
    gutenberg = shared_data / "corpus" / "gutenberg"
    docs, _ = sources.read_documents(f"{gutenberg}/pg84_frankenstein.txt,"
                                     f"{gutenberg}/pg74_tom_sawyer.txt")
    return tok, np.concatenate([np.asarray(tok.encode(s), np.int32) for d in docs for s in d])


def test_span_corruption_statistics_and_round_trip_on_real_text(real_tokens):
    tok, stream = real_tokens
    vocab = tok.vocab_size + 100
    sentinels = spans.sentinel_ids(vocab, 100)
    assert sentinels[0] == vocab - 1 and np.all(np.diff(sentinels) == -1)
    rng = np.random.default_rng(0)
    raw_len, targets_len = spans.random_spans_helper(512, 0.15, 3.0)
    noise, span_count, total = 0, 0, 0
    examples = [stream[i:i + raw_len] for i in range(0, stream.size - raw_len, raw_len)]
    assert len(examples) > 300
    for raw in examples:
        inputs, targets = spans.span_corrupt(raw, rng, noise_density=0.15,
                                             mean_noise_span_length=3.0, sentinels=sentinels,
                                             eos_id=tok.sep_id)
        assert inputs.size == 512 and targets.size == targets_len  # exact lengths
        assert inputs[-1] == targets[-1] == tok.sep_id
        in_sent = inputs[inputs >= tok.vocab_size]
        tg_sent = targets[targets >= tok.vocab_size]
        # Descending from the top, and the same sentinels on both sides.
        np.testing.assert_array_equal(in_sent, sentinels[:in_sent.size])
        np.testing.assert_array_equal(in_sent, tg_sent)
        # Re-inserting each target span at its sentinel gives back the raw tokens.
        spans_by_sentinel, current = {}, None
        for t in targets[:-1]:
            if t >= tok.vocab_size:
                current = int(t)
                spans_by_sentinel[current] = []
            else:
                spans_by_sentinel[current].append(int(t))
        rebuilt = []
        for t in inputs[:-1]:
            rebuilt.extend(spans_by_sentinel[int(t)] if t >= tok.vocab_size else [int(t)])
        np.testing.assert_array_equal(rebuilt, raw)
        noise += sum(len(v) for v in spans_by_sentinel.values())
        span_count += len(spans_by_sentinel)
        total += raw.size
    assert abs(noise / total - 0.15) <= 0.01
    assert abs(noise / span_count - 3.0) <= 0.3


def test_span_lengths_vary_and_noise_positions_spread(real_tokens):
    """Random segmentation, not fixed spans: lengths vary and every position gets noised."""
    rng = np.random.default_rng(1)
    masks = np.stack([spans.random_spans_noise_mask(568, 0.15, 3.0, rng) for _ in range(2000)])
    assert masks.sum(1).min() == masks.sum(1).max() == 85  # fixed count per example
    assert not masks[:, 0].any() and masks[:, -1].all()  # starts clean, ends in noise
    per_position = masks[:, 1:-1].mean(0)
    assert 0.10 < per_position.mean() < 0.16 and per_position.min() > 0.05
    lengths = np.concatenate([np.diff(np.flatnonzero(np.diff(np.r_[0, m, 0]))) [::2]
                              for m in masks[:50].astype(int)])
    assert lengths.min() == 1 and lengths.max() >= 8


# ---- packing ------------------------------------------------------------------

def test_first_fit_plan_packs_both_features():
    lengths = [(100, 20), (60, 10), (40, 25), (30, 5), (128, 29), (10, 2)]
    rows = packing.plan_rows(lengths, (128, 29))
    assert sorted(i for r in rows for i in r) == list(range(6))
    for row in rows:
        assert sum(lengths[i][0] for i in row) <= 128 and sum(lengths[i][1] for i in row) <= 29
    assert rows[0] == [0, 5] and [4] in rows


def test_decoder_inputs_restart_in_every_segment():
    targets = np.array([5, 6, 1, 7, 8, 9, 1, 0, 0])
    segments = np.array([1, 1, 1, 2, 2, 2, 2, 0, 0])
    np.testing.assert_array_equal(packing.shift_right_by_segment(targets, segments),
                                  [0, 5, 6, 0, 7, 8, 9, 0, 0])


def _tiny_model(**kw):
    cfg = tiny_t5_config().model
    for k, v in kw.items():
        cfg[k] = v
    return t5.T5(cfg)


def _row(objective_pairs, inputs_len=48, targets_len=16):
    enc, enc_seg, _ = packing.pack_feature([p[0] for p in objective_pairs], inputs_len)
    dec, dec_seg, _ = packing.pack_feature([p[1] for p in objective_pairs], targets_len)
    return {"encoder_input_tokens": enc[None], "encoder_segment_ids": enc_seg[None],
            "decoder_input_tokens": packing.shift_right_by_segment(dec, dec_seg)[None],
            "decoder_segment_ids": dec_seg[None], "decoder_target_tokens": dec[None]}


@pytest.mark.parametrize("variant", ["relu", "gated-gelu"])
def test_packed_examples_never_see_each_other(variant):
    """Changing one packed example leaves every other example's logits unchanged, and an
    example packed behind others scores as it does alone (positions restart)."""
    model = _tiny_model(feed_forward=variant, tie_output=variant == "relu")
    rng = np.random.default_rng(0)
    ex = lambda n, m: (rng.integers(3, 4000, n), rng.integers(3, 4000, m))  # noqa: E731
    a, b, c = ex(15, 5), ex(20, 6), ex(10, 4)
    b_changed = (rng.integers(3, 4000, 20), rng.integers(3, 4000, 6))
    params = jax.jit(model.init)(jax.random.key(0), _row([a, b, c]))["params"]
    apply = jax.jit(model.apply)  # eagerly, every op of every layer compiles alone
    logits = lambda row: np.asarray(apply({"params": params}, row)["logits"][0])  # noqa
    base, changed = logits(_row([a, b, c])), logits(_row([a, b_changed, c]))
    seg = _row([a, b, c])["decoder_segment_ids"][0]
    for s in (1, 3):  # a and c: bitwise untouched by b's encoder and decoder tokens
        np.testing.assert_array_equal(base[seg == s], changed[seg == s])
    assert not np.allclose(base[seg == 2], changed[seg == 2])
    alone = logits(_row([c]))
    np.testing.assert_allclose(base[seg == 3], alone[: (seg == 3).sum()], atol=2e-5)


# ---- model --------------------------------------------------------------------

def test_relative_position_buckets_match_t5():
    rel = np.arange(-200, 201)
    enc = relative.relative_position_bucket(rel, True, 32, 128)
    dec = relative.relative_position_bucket(rel, False, 32, 128)
    # Exact near 0, logarithmic further out, capped; the encoder gives keys after the
    # query the upper 16 buckets.
    assert list(enc[200:208]) == [0] + list(range(17, 24))
    assert list(enc[193:200]) == list(range(7, 0, -1))
    assert set(np.unique(enc)) == set(range(32)) - {16}  # T5 never uses bucket 16
    assert np.all(dec[rel > 0] == 0) and list(dec[200 - 15:201][::-1]) == list(range(16))
    assert dec.max() == 31


@pytest.mark.parametrize("arg,published", [
    ("small", 60_506_624), ("base", 222_903_552), ("large", 737_668_096),
    ("v1_1_small", 76_961_152), ("v1_1_base", 247_577_856), ("v1_1_large", 783_150_080)])
def test_published_sizes(arg, published):
    """Counts of the released T5 1.0 / 1.1 checkpoints (paper: about 60M, 220M, 770M)."""
    info = loop.describe(load_config("t5.py", arg))
    assert abs(info["params"] - published) / published < 0.01
    assert info["inputs_length"] == 512 and info["targets_length"] == 114


def _hf_model(cfg):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    hf_cfg = transformers.T5Config(
        vocab_size=cfg.vocab_size, d_model=cfg.hidden_size, d_kv=cfg.head_dim,
        d_ff=cfg.mlp_dim, num_layers=cfg.num_layers, num_decoder_layers=cfg.num_decoder_layers,
        num_heads=cfg.num_heads, relative_attention_num_buckets=32,
        relative_attention_max_distance=128, dropout_rate=0.0,
        feed_forward_proj=cfg.feed_forward, tie_word_embeddings=cfg.tie_output,
        layer_norm_epsilon=cfg.layer_norm_eps, decoder_start_token_id=0)
    return torch, transformers.T5ForConditionalGeneration(hf_cfg).eval()


def _load_into_hf(torch, hf, params, cfg):
    p = jax.tree_util.tree_map(np.asarray, params)
    sd = {}
    lin = lambda k: torch.tensor(k.reshape(k.shape[0], -1).T.copy())  # noqa: E731
    out = lambda k: torch.tensor(k.reshape(-1, k.shape[-1]).T.copy())  # noqa: E731
    sd["shared.weight"] = torch.tensor(p["token_embed"]["embedding"])
    for stack, n in (("encoder", cfg.num_layers), ("decoder", cfg.num_decoder_layers)):
        sd[f"{stack}.embed_tokens.weight"] = sd["shared.weight"]
        sd[f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"] = \
            torch.tensor(p[f"{stack}_relpos"]["rel_embedding"])
        sd[f"{stack}.final_layer_norm.weight"] = torch.tensor(p[f"{stack}_norm"]["scale"])
        for i in range(n):
            layer = p[f"{stack}_{i}"]
            pre = f"{stack}.block.{i}.layer"
            attns = [("attention", "SelfAttention", "attention_norm")] if stack == "encoder" \
                else [("self_attention", "SelfAttention", "self_attention_norm"),
                      ("cross_attention", "EncDecAttention", "cross_attention_norm")]
            for j, (ours, theirs, norm) in enumerate(attns):
                for name in ("query", "key", "value"):
                    sd[f"{pre}.{j}.{theirs}.{name[0]}.weight"] = lin(layer[ours][name]["kernel"])
                sd[f"{pre}.{j}.{theirs}.o.weight"] = out(layer[ours]["out"]["kernel"])
                sd[f"{pre}.{j}.layer_norm.weight"] = torch.tensor(layer[norm]["scale"])
            j = len(attns)
            for name, kernel in layer["mlp"].items():
                sd[f"{pre}.{j}.DenseReluDense.{name}.weight"] = torch.tensor(kernel["kernel"].T)
            sd[f"{pre}.{j}.layer_norm.weight"] = torch.tensor(layer["mlp_norm"]["scale"])
    if not cfg.tie_output:
        sd["lm_head.weight"] = torch.tensor(p["output"]["kernel"].T)
    else:
        sd["lm_head.weight"] = sd["shared.weight"]
    missing, unexpected = hf.load_state_dict(sd, strict=False)
    assert not unexpected and all("relative_attention_bias" in m for m in missing
                                  if not m.startswith("lm_head")), (missing, unexpected)


def _transformers_major() -> int:
    import transformers
    return int(transformers.__version__.split(".")[0])


def test_a_t5_1_1_folder_in_transformers_5_form_imports_unscaled(tmp_path):
    """transformers 5 writes T5 1.1 as tie_word_embeddings=true, scale_decoder_outputs=
    false and keeps only the word table: it imports as our untied, unscaled output layer
    holding that table, and computes transformers' logits (it read as T5 1.0: scaled)."""
    from safetensors.numpy import load_file, save_file
    from pretrainx import interop
    cfg = tiny_t5_config(**{"model.feed_forward": "gated-gelu", "model.tie_output": False,
                            "model.dropout_rate": 0.0}).model
    torch, hf = _hf_model(cfg)
    with torch.no_grad():  # the 1.1 model transformers 5 holds: its output is the table
        hf.lm_head.weight.copy_(hf.shared.weight)
    hf.save_pretrained(tmp_path)
    state = {k: v for k, v in load_file(str(tmp_path / "model.safetensors")).items()
             if k != "lm_head.weight"}
    save_file(state, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((tmp_path / "config.json").read_text())
    config.update(tie_word_embeddings=True, scale_decoder_outputs=False)
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "spiece.model").write_bytes((REPO / "pretrainx/assets/spm_t5_4k.model")
                                            .read_bytes())
    pretrained = interop.load(str(tmp_path))
    assert pretrained.model.tie_output is False
    rng = np.random.default_rng(0)
    enc = rng.integers(3, 4000, (1, 20)).astype(np.int32)
    dec = rng.integers(3, 4000, (1, 6)).astype(np.int32)
    batch = {"encoder_input_tokens": enc, "encoder_segment_ids": np.ones_like(enc),
             "decoder_input_tokens": dec, "decoder_target_tokens": dec,
             "decoder_segment_ids": np.ones_like(dec)}
    apply = jax.jit(t5.T5(pretrained.model).apply)
    ours = np.asarray(apply({"params": pretrained.params}, batch)["logits"])
    with torch.no_grad():
        theirs = hf(input_ids=torch.tensor(enc, dtype=torch.long),
                    decoder_input_ids=torch.tensor(dec, dtype=torch.long)).logits.numpy()
    np.testing.assert_allclose(ours, theirs, atol=2e-4, rtol=2e-4)


@pytest.mark.parametrize("variant", ["relu", "gated-gelu", "gated-silu"])
def test_matches_huggingface_t5(variant):
    """T5 1.0 (tied, ReLU), 1.1 (untied, gated-GELU) and UL2 20B's (untied, gated-SiLU)
    against transformers' PyTorch T5."""
    from flax import linen as nn
    cfg = tiny_t5_config(**{"model.feed_forward": variant,
                            "model.tie_output": variant == "relu",
                            "model.dropout_rate": 0.0}).model
    torch, hf = _hf_model(cfg)
    model = t5.T5(cfg)
    rng = np.random.default_rng(0)
    enc = rng.integers(3, 4100, (2, 40)).astype(np.int32)
    dec_targets = rng.integers(3, 4100, (2, 12)).astype(np.int32)
    batch = {"encoder_input_tokens": enc, "encoder_segment_ids": np.ones_like(enc),
             "decoder_target_tokens": dec_targets,
             "decoder_input_tokens": np.concatenate([np.zeros((2, 1), np.int32),
                                                     dec_targets[:, :-1]], 1),
             "decoder_segment_ids": np.ones_like(dec_targets)}
    params = nn.unbox(jax.jit(model.init)(jax.random.key(1), batch)["params"])
    if not cfg.tie_output and _transformers_major() >= 5:
        # transformers 5 ties every T5's output layer to the word table (scaled or not by
        # scale_decoder_outputs): T5 1.1 there is an untied, unscaled output equal to it
        params["output"]["kernel"] = np.asarray(params["token_embed"]["embedding"]).T
    ours = np.asarray(jax.jit(model.apply)({"params": params}, batch)["logits"])
    _load_into_hf(torch, hf, params, cfg)
    with torch.no_grad():
        theirs = hf(input_ids=torch.tensor(enc, dtype=torch.long),
                    decoder_input_ids=torch.tensor(batch["decoder_input_tokens"],
                                                   dtype=torch.long)).logits.numpy()
    np.testing.assert_allclose(ours, theirs, atol=2e-4, rtol=2e-4)


# ---- training -----------------------------------------------------------------

def _losses(workdir):
    return [r["loss"] for r in read_metrics(workdir)]


@pytest.mark.slow
def test_t5_sharded_equals_unsharded(tmp_path):
    one = tiny_t5_config(total_steps=4, **{"mesh.data": 1})
    loop.train(one, str(tmp_path / "one"), devices=jax.devices()[:1])
    mesh = tiny_t5_config(total_steps=4, **{"mesh.data": 2, "mesh.fsdp": 2, "mesh.tensor": 2})
    loop.train(mesh, str(tmp_path / "mesh"))
    a, b = _losses(tmp_path / "one"), _losses(tmp_path / "mesh")
    assert len(a) == len(b) == 4 and a[0] != a[-1]
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)


@pytest.mark.slow
def test_t5_resume_is_exact_and_accumulation_matches(tmp_path):
    cfg = tiny_t5_config(total_steps=4, checkpoint_every=2)
    loop.train(cfg, str(tmp_path / "straight"))
    loop.train(cfg, str(tmp_path / "resumed"), stop_at=2)
    loop.train(cfg, str(tmp_path / "resumed"))
    assert _losses(tmp_path / "straight") == _losses(tmp_path / "resumed")
    # Loss per target token of the global batch: 2 micro-batches change nothing.
    acc = tiny_t5_config(total_steps=4, checkpoint_every=2, micro_batches=2, **{"mesh.data": 1})
    loop.train(acc, str(tmp_path / "acc"), devices=jax.devices()[:1])
    np.testing.assert_allclose(_losses(tmp_path / "straight"), _losses(tmp_path / "acc"),
                               rtol=0, atol=1e-5)


def test_t5_loss_falls_on_real_text(tmp_path):
    cfg = tiny_t5_config(total_steps=40, log_every=10, eval_every=40, checkpoint_every=40,
                         **{"optimizer.learning_rate": 3e-3, "optimizer.warmup_steps": 5})
    result = loop.train(cfg, str(tmp_path), devices=jax.devices()[:1])
    losses = _losses(tmp_path)
    assert losses[-1] < losses[0] - 1.5, losses
    assert result["eval"]["cross_entropy"] < np.log(4224) - 1.5


def test_adafactor_with_t5_schedule_trains(tmp_path):
    from pretrainx.train import schedules
    cfg = load_config("t5.py", "small,adafactor")
    schedule = schedules.learning_rate_schedule(cfg.optimizer, cfg.total_steps)
    np.testing.assert_allclose([float(schedule(s)) for s in (0, 5000, 10000, 40000)],
                               [0.01, 0.01, 0.01, 0.005], rtol=1e-6)
    tiny = tiny_t5_config(total_steps=3, **{"optimizer.name": "adafactor",
                                            "optimizer.schedule": "rsqrt",
                                            "optimizer.learning_rate": 0.01,
                                            "optimizer.warmup_steps": 100,
                                            "optimizer.weight_decay": 0.0})
    loop.train(tiny, str(tmp_path), devices=jax.devices()[:1])
    losses = _losses(tmp_path)
    assert len(losses) == 3 and all(np.isfinite(losses)) and losses[-1] < losses[0]


def test_z_loss_is_added_per_target_token():
    from pretrainx.objectives.seq2seq import cross_entropy_sums
    logits = jnp.array([[[2.0, 0.0, -1.0], [0.5, 0.5, 3.0]]])
    targets = jnp.array([[0, 2]])
    weights = jnp.array([[1.0, 1.0]])
    sums = cross_entropy_sums(logits, targets, weights, 1e-4)
    log_z = jax.nn.logsumexp(logits, -1)
    np.testing.assert_allclose(sums["z_loss_sum"], 1e-4 * np.sum(np.square(log_z)), rtol=1e-6)
    assert float(sums["correct_sum"]) == 2.0


# ---- statistics command ---------------------------------------------------------

@pytest.mark.parametrize("config,keys", [
    ("t5_quickstart.py", ("noise_density", "mean_noise_span_length", "inputs_length",
                          "targets_length")),
    ("quickstart.py", ("masked_fraction", "mask_token_fraction", "random_token_fraction",
                       "kept_fraction", "nsp_positive_fraction"))])
def test_stats_command(config, keys):
    out = run_module("pretrainx.data", [f"--config=configs/{config}", "--stats",
                                        "--num_batches=3", "--show=1"], cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    stats = json.loads(out.stdout.strip().splitlines()[-1])
    for key in ("packing_efficiency", "examples_per_row", "tokens_per_sec") + keys:
        assert key in stats, key
    assert "--- row 0" in out.stderr
    if config == "t5_quickstart.py":
        assert stats["inputs_length"] == 512 and stats["targets_length"] == 114
        assert abs(stats["noise_density"] - 0.15) < 0.01
        assert stats["packing_efficiency"] > 0.98
    else:
        assert abs(stats["masked_fraction"] - 0.15) < 0.01
