"""Contrastive fine-tuning into a sentence embedder (task contrastive): InfoNCE as the
papers write it, in-batch negatives that span the global batch (1 device and 8 give one
loss), pairs read from TSV, JSONL and Parquet with hard negatives, STS-B's dev scored by
Spearman of cosines and held-out pairs by retrieval, bad input in one line."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import REPO, override, read_metrics
from pretrainx.data.tokenizers import load_tokenizer
from pretrainx.errors import UserError
from pretrainx.finetune import contrastive, loop as finetune_loop
from pretrainx.finetune.config import finetune_config

SPM = str(REPO / "pretrainx" / "assets" / "spm_4k.model")


def _cfg(shared_data, **overrides):
    c = finetune_config()
    c.task = "contrastive"
    c.data.glue_dir = str(shared_data / "glue")
    c.data.tokenizer = SPM
    c.seq_len = 32
    c.global_batch_size = 16
    c.eval_batch_size = 64
    c.epochs = 1
    c.log_every = 1
    c.data.max_train_examples = 64
    c.data.max_eval_examples = 64
    c.optimizer.learning_rate = 1e-3
    c.model.update(num_layers=2, hidden_size=64, num_heads=4, mlp_dim=128, vocab_size=4096)
    return override(c, overrides)


def test_infonce_is_cross_entropy_over_every_candidate_of_the_batch():
    rng = np.random.default_rng(0)
    e = rng.normal(size=(4, 3, 8)).astype(np.float32)  # anchor, positive, hard negative
    sums = contrastive.InfoNceLoss(0.05).loss_sums({"logits": jnp.asarray(e)},
                                                   {"weight": jnp.ones(4)})
    unit = e / np.linalg.norm(e, axis=-1, keepdims=True)
    candidates = np.concatenate([unit[:, 1], unit[:, 2]])  # 4 positives, then 4 negatives
    logits = unit[:, 0] @ candidates.T / 0.05
    log_softmax = logits - np.log(np.sum(np.exp(logits - logits.max(1, keepdims=True)), 1,
                                         keepdims=True)) - logits.max(1, keepdims=True)
    want = -np.mean([log_softmax[i, i] for i in range(4)])
    np.testing.assert_allclose(float(sums["loss_sum"]) / 4, want, rtol=1e-5)


def test_a_learned_temperature_is_the_fixed_one_at_its_start_and_is_capped():
    """CLIP's parametrisation: log(1 / 0.05) as the model's output gives the fixed 0.05
    loss, its gradient is not zero, and a scale past 100 counts as 100."""
    rng = np.random.default_rng(1)
    e = jnp.asarray(rng.normal(size=(4, 2, 8)).astype(np.float32))
    batch = {"weight": jnp.ones(4)}
    loss = contrastive.InfoNceLoss(1.0)
    fixed = contrastive.InfoNceLoss(0.05).loss_sums({"logits": e}, batch)
    learned = loss.loss_sums({"logits": e, "log_scale": jnp.log(20.0)}, batch)
    np.testing.assert_allclose(learned["loss_sum"], fixed["loss_sum"], rtol=1e-6)
    assert float(learned["temperature_sum"]) == pytest.approx(4 * 0.05)
    grad = jax.grad(lambda s: loss.loss_sums({"logits": e, "log_scale": s}, batch)["loss_sum"])
    assert abs(float(grad(jnp.log(20.0)))) > 1e-3
    capped = loss.loss_sums({"logits": e, "log_scale": jnp.log(1000.0)}, batch)
    at_cap = contrastive.InfoNceLoss(0.01).loss_sums({"logits": e}, batch)
    np.testing.assert_allclose(capped["loss_sum"], at_cap["loss_sum"], rtol=1e-6)


def test_a_learned_temperature_trains_under_peft_beside_the_task_head():
    """LoRA freezes the encoder's own weights, never the temperature."""
    from pretrainx.finetune.loop import TASK_PARAMS
    from pretrainx.models import peft as peft_lib
    params = {"encoder": {"kernel": np.zeros((2, 2))},
              contrastive.SCALE: {"log_scale": np.zeros(())}}
    labels = peft_lib.trainable_labels(params, peft_lib.Peft(method="lora"), TASK_PARAMS)
    assert labels == {"encoder": {"kernel": "freeze"}, contrastive.SCALE: {"log_scale": "train"}}


@pytest.mark.slow
def test_in_batch_negatives_span_the_global_batch_on_one_device_and_eight(
        shared_data, tmp_path):
    """STS-B's train pairs scored >= 4, a tiny BERT from random init, the temperature
    learned: the same losses and temperatures on one device and on 8 data-parallel ones
    (each holds 2 of the 16 anchors, and each anchor still ranks all 16 positives), the
    loss falling, the temperature moving from its start, STS-B dev Spearman scored; the
    kept model is the encoder alone (the temperature is the training's, not the model's)."""
    keys = {"data.max_train_examples": 128, "data.learn_temperature": True}
    one = _cfg(shared_data, **{"mesh.data": 1, **keys})
    finetune_loop.train(one, str(tmp_path / "one"), devices=jax.devices()[:1])
    eight = _cfg(shared_data, **{"mesh.data": 8, **keys})
    out = finetune_loop.train(eight, str(tmp_path / "eight"))
    a, b = ([r for r in read_metrics(tmp_path / run) if "loss" in r] for run in ("one", "eight"))
    assert len(a) == len(b) == 8
    for key in ("loss", "temperature"):
        np.testing.assert_allclose([r[key] for r in a], [r[key] for r in b], rtol=0, atol=1e-5)
    losses = [r["loss"] for r in a]
    assert np.mean(losses[-3:]) < losses[0] - 0.2, losses  # learning: below the first step's
    assert a[0]["temperature"] == pytest.approx(0.05, rel=0.02)
    # trained: each Adam update moves its log by about the rate (1e-3, decaying)
    assert a[-1]["temperature"] < 0.05 - 1e-4, [r["temperature"] for r in a]
    assert -1 <= out["best"]["spearman"] <= 1
    from pretrainx import interop
    tuned = interop.load(str(tmp_path / "eight"))
    assert tuned.head == "embed_mean" and contrastive.SCALE not in tuned.params


def _pairs(tmp_path, kind):
    rows = [{"q": f"question {i} about cats", "p": f"answer {i} on cats", "n": f"noise {i}"}
            for i in range(6)]
    path = tmp_path / f"pairs.{kind}"
    if kind == "tsv":
        path.write_text("q\tp\tn\n" + "".join(f"{r['q']}\t{r['p']}\t{r['n']}\n" for r in rows))
    elif kind == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


@pytest.mark.parametrize("kind", ["tsv", "jsonl", "parquet"])
def test_pairs_files_with_hard_negatives(kind, tmp_path):
    rows = contrastive.read_pairs(_pairs(tmp_path, kind), ["q", "p", "n"])
    assert rows[2] == ("question 2 about cats", "answer 2 on cats", "noise 2")
    arrays = contrastive.encode_rows(rows, load_tokenizer(SPM, lower_case=True), 16)
    assert arrays["input_ids"].shape == (6, 3, 16) and arrays["weight"].shape == (6,)


def test_retrieval_scores_rank_each_anchor_among_every_positive():
    e = np.zeros((3, 2, 2))
    e[:, 0] = [[1, 0], [0, 1], [1, 1]]  # anchors
    e[:, 1] = [[1, 0], [1, -0.5], [1, 1]]  # anchor 1's own positive ranks third
    got = contrastive.retrieval_scores(e)
    assert got["recall_at_1"] == pytest.approx(2 / 3)
    assert got["mrr_at_10"] == pytest.approx((1 + 1 / 3 + 1) / 3)


@pytest.mark.parametrize("change,words", [
    ({"data.pair_fields": "q"}, "name an anchor and a positive"),
    ({"data.pair_fields": "q,missing"}, "no text column 'missing'"),
    ({"data.pooling": "max"}, "data.pooling"),
    ({"data.temperature": 0.0}, "data.temperature=0.0 must be positive"),
])
def test_bad_pairs_input_is_one_line(change, words, shared_data, tmp_path):
    cfg = _cfg(shared_data, **{"data.pairs_file": _pairs(tmp_path, "tsv"),
                               "data.pair_fields": "q,p", **change})
    with pytest.raises(UserError) as e:
        finetune_loop.train(cfg, str(tmp_path / "w"), devices=jax.devices()[:1])
    assert words in str(e.value) and "\n" not in str(e.value), str(e.value)
