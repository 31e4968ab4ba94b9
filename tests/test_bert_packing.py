"""Packed BERT pairs (Krell et al. 2021): several [CLS] A [SEP] B [SEP] examples a row
give each example the losses it gets alone, leave less padding, and train."""

import json
import subprocess
import sys

import jax
import numpy as np
import optax
import pytest
from flax import linen as nn

from conftest import ALICE, REPO, load_config, override, read_metrics
from pretrainx import config as config_lib
from pretrainx import objectives
from pretrainx.data.tokenizers import load_tokenizer
from pretrainx.objectives import packed_pairs
from pretrainx.train import loop

SPM = str(REPO / "pretrainx" / "assets" / "spm_4k.model")


def _config(**overrides):
    c = load_config("quickstart.py")
    c.model.update(num_layers=2, hidden_size=64, num_heads=4, mlp_dim=128, dropout_rate=0.0,
                   attention_dropout_rate=0.0)
    return override(c, {"seq_len": 128, "data.max_predictions_per_seq": 20,
                        "data.short_seq_prob": 0.5, "data.dupe_factor": 1,
                        "data.train_files": ALICE, "data.eval_files": "", **overrides})


def test_packed_examples_get_the_losses_they_get_alone():
    """Pairs packed three to a row (segment ids, restarting positions and types, the NSP
    head at each [CLS], each example's masks at its offset) give every example the MLM
    and NSP losses of the same example in a row of its own: float32, within 1e-5."""
    cfg = _config()
    tokenizer = load_tokenizer(SPM, lower_case=True)
    single = objectives.build(cfg, tokenizer)
    packed_objective = objectives.build(override(_config(), {"data.pack_examples": True}),
                                        tokenizer)
    phase = config_lib.phases(cfg)[0]
    docs = single.corpus.documents(ALICE)
    pairs = single.examples_from_documents(docs, phase, train=True)
    short = [p for p in pairs if p["input_ids"].size <= 40][:9]
    assert len(short) == 9 and len({int(p["next_sentence_label"]) for p in short}) == 2
    rows = packed_pairs.pack_pairs(short, 128, 3)
    assert len(rows) == 3 and all(len(r["lengths"]) == 3 for r in rows)
    alone_fn = single.transform(phase, train=True)
    seeds = iter(range(100))
    rngs = [[np.random.default_rng(next(seeds)) for _ in r["lengths"]] for r in rows]
    packed = [packed_pairs.masked_row(r, g, alone_fn, 128, 3, 20, tokenizer.pad_id)
              for r, g in zip(rows, rngs)]
    order = [e for r in rows for e in _members(short, r)]
    alone = [alone_fn(short[i], np.random.default_rng(s)) for i, s in zip(order, range(9))]
    stack = lambda xs: {k: np.stack([x[k] for x in xs]) for k in xs[0]}  # noqa: E731
    packed_batch, alone_batch = stack(packed), stack(alone)
    model = packed_objective.model
    params = nn.unbox(model.init(jax.random.key(0), alone_batch)["params"])
    p_out = model.apply({"params": params}, packed_batch)
    a_out = model.apply({"params": params}, alone_batch)
    p_mlm = _per_slot(p_out["mlm_logits"], packed_batch)
    a_mlm = _per_slot(a_out["mlm_logits"], alone_batch)
    for r in range(3):  # each example's predictions, in order, at its offset in the row
        owner = np.take(packed_batch["attention_mask"][r], packed_batch["masked_lm_positions"][r])
        real = packed_batch["masked_lm_weights"][r] > 0
        for e in range(3):
            mine = p_mlm[r][real & (owner == e + 1)]
            theirs = a_mlm[3 * r + e][alone_batch["masked_lm_weights"][3 * r + e] > 0]
            assert mine.size == theirs.size > 0
            np.testing.assert_allclose(mine, theirs, rtol=0, atol=1e-5)
    p_nsp = optax.softmax_cross_entropy_with_integer_labels(
        p_out["nsp_logits"], packed_batch["next_sentence_label"]).reshape(9)
    a_nsp = optax.softmax_cross_entropy_with_integer_labels(
        a_out["nsp_logits"], alone_batch["next_sentence_label"])
    np.testing.assert_allclose(np.asarray(p_nsp), np.asarray(a_nsp), rtol=0, atol=1e-5)
    assert (packed_batch["attention_mask"].max(axis=1) == 3).all()
    assert packed_batch["masked_lm_positions"].shape[1] == 20 + 3  # the row's budget + 1 each


def _members(pairs, row):
    """Which of `pairs` a packed row holds, in order (by their tokens)."""
    out, offset = [], 0
    for n in row["lengths"]:
        ids = row["input_ids"][offset:offset + n]
        out.append(next(i for i, p in enumerate(pairs) if np.array_equal(p["input_ids"], ids)))
        offset += n
    return out


def _per_slot(logits, batch):
    """Each prediction slot's cross-entropy, 0 where the slot is empty."""
    nll = optax.softmax_cross_entropy_with_integer_labels(logits, batch["masked_lm_ids"])
    return np.asarray(nll * batch["masked_lm_weights"])


def _stats(*extra):
    out = subprocess.run(
        [sys.executable, "-m", "pretrainx.data", "--config=configs/quickstart.py", "--stats",
         "--num_batches=4", "--show=1", "--config.seq_len=128",
         "--config.data.max_predictions_per_seq=20", f"--config.data.train_files={ALICE}",
         *extra], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


@pytest.mark.slow
def test_stats_show_less_padding_packed():
    """--stats at 128 on Alice: BERT's pairs fill their target length (6% padding), and
    packing the shorter ones (short_seq_prob, document ends) leaves under half of that;
    IsNext stays about half of the examples; --show labels each example of a row."""
    unpacked, _ = _stats()
    packed, shown = _stats("--config.data.pack_examples=True")
    assert unpacked["examples_per_row"] == 1.0 and packed["examples_per_row"] > 1.04
    assert packed["padding_fraction"] < unpacked["padding_fraction"] / 2
    assert abs(packed["nsp_positive_fraction"] - 0.5) < 0.1
    assert abs(packed["masked_fraction"] - 0.15) < 0.01
    assert "IsNext" in shown or "NotNext" in shown


@pytest.mark.slow
def test_packed_rows_train_and_shard(tmp_path):
    """12 packed steps: finite, falling losses, and a (data 2, fsdp 2, tensor 2) mesh
    gives the single device's losses."""
    quick = {"total_steps": 12, "log_every": 1, "eval_every": 1000, "checkpoint_every": 12,
             "global_batch_size": 8, "seq_len": 64, "data.max_predictions_per_seq": 10,
             "data.pack_examples": True, "optimizer.warmup_steps": 2,
             "optimizer.learning_rate": 1e-2}
    loop.train(_config(**quick), str(tmp_path / "one"), devices=jax.devices()[:1])
    loop.train(_config(**quick, **{"mesh.data": 2, "mesh.fsdp": 2, "mesh.tensor": 2}),
               str(tmp_path / "mesh"))
    a = [r["loss"] for r in read_metrics(tmp_path / "one")]
    b = [r["loss"] for r in read_metrics(tmp_path / "mesh")]
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
    assert np.isfinite(a).all() and np.mean(a[-3:]) < a[0] - 0.5, a
