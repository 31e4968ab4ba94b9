"""SpanBERT: span masking statistics as the paper sets them, the span boundary
objective's inputs, single-document rows, the base model's size, training on real text."""

import json

import jax
import numpy as np
import pytest

from cli_fork import run_module
from conftest import REPO, load_config, read_metrics, shrink_recipe
from pretrainx import config as config_lib
from pretrainx import objectives
from pretrainx.data.tokenizers import load_tokenizer
from pretrainx.families.spanbert.span_mlm import mask_spans, span_length_probs
from pretrainx.train import loop

ASSETS = REPO / "pretrainx" / "assets"
PRIDE = str(ASSETS / "text" / "pg1342_pride_and_prejudice.txt")


def tiny_spanbert_config(**overrides):
    return shrink_recipe("spanbert_base.py", learning_rate=1e-2, model={"vocab_size": 4096},
                         **{"data.tokenizer": str(ASSETS / "spm_4k.model"), **overrides})


@pytest.fixture(scope="module")
def rows(shared_data):
    """Pride and Prejudice as SpanBERT's 512-token rows, with BERT's WordPiece."""
    vocab = str(shared_data / "tokenizers" / "bert-base-uncased" / "vocab.txt")
    cfg = tiny_spanbert_config(**{"seq_len": 512, "data.tokenizer": vocab,
                                  "data.lower_case": True, "model.vocab_size": 30522,
                                  "data.max_predictions_per_seq": 80})
    objective = objectives.build(cfg, load_tokenizer(vocab, lower_case=True))
    phase = config_lib.phases(cfg)[0]
    return objective, objective.examples_from_documents(
        objective.corpus.documents(PRIDE), phase, train=True)


def test_rows_are_single_segments_of_one_document(rows):
    objective, examples = rows
    tok = objective.tokenizer
    assert len(examples) > 250
    for e in examples:
        ids = e["input_ids"]
        assert ids[0] == tok.cls_id and ids[-1] == tok.sep_id and ids.size <= 512
        assert (ids == tok.sep_id).sum() == 1 and (ids == tok.cls_id).sum() == 1
    sizes = np.array([e["input_ids"].size for e in examples])
    assert np.median(sizes) > 480  # full length but for each document's last row


def test_span_masking_statistics(rows):
    """Geo(0.2) cut at 10 words (mean 3.8), whole words, uniform starts, 15% of the
    tokens, 80/10/10 per span, and the SBO's boundaries and offsets."""
    objective, examples = rows
    tok = objective.tokenizer
    specials = tok.special_ids()
    rng = np.random.default_rng(0)
    record, masked, candidates, kinds = [], 0, 0, np.zeros(3)
    for e in examples * 3:
        ids = np.full(512, tok.pad_id, np.int32)
        ids[:e["input_ids"].size] = e["input_ids"]
        starts = tok.word_start_mask(ids)
        out = mask_spans(ids, rng, vocab_size=tok.vocab_size, mask_id=tok.mask_id,
                         special_ids=specials, word_starts=starts, max_predictions=80,
                         mask_prob=0.15, record=record)
        n = int(out["masked_lm_weights"].sum())
        pos = out["masked_lm_positions"][:n]
        assert np.all(np.diff(pos) > 0) and not np.isin(ids[pos], specials).any()
        np.testing.assert_array_equal(out["masked_lm_ids"][:n], ids[pos])
        left, right = out["sbo_left"][:n], out["sbo_right"][:n]
        np.testing.assert_array_equal(pos - left - 1, out["sbo_offset"][:n])
        for s in np.unique(left):
            span = pos[left == s]
            e_ = int(right[left == s][0])
            np.testing.assert_array_equal(span, np.arange(s + 1, e_))  # contiguous
            assert starts[s + 1] and (starts[e_] or np.isin(ids[e_], specials))  # whole words
            now = out["input_ids"][span]
            kinds += [(now == tok.mask_id).all(), (now == ids[span]).all(),
                      not ((now == tok.mask_id).all() or (now == ids[span]).all())]
        unmasked = np.ones(512, bool)
        unmasked[pos] = False
        np.testing.assert_array_equal(out["input_ids"][unmasked], ids[unmasked])
        masked += n
        candidates += int((~np.isin(ids, specials)).sum())
    sampled, words, tokens = (np.array(x) for x in zip(*record))
    assert len(sampled) > 15_000
    probs = span_length_probs(0.2, 10)
    assert abs((probs * np.arange(1, 11)).sum() - 3.8) < 0.01  # the paper's mean
    hist = np.bincount(sampled, minlength=11)[1:] / sampled.size
    np.testing.assert_allclose(hist, probs, atol=0.01)
    assert abs(sampled.mean() - 3.8) < 0.05
    assert np.all(words <= sampled) and np.all(tokens >= words)
    assert np.mean(words == sampled) > 0.8  # most spans are as long as drawn
    assert abs(masked / candidates - 0.15) < 0.003
    assert np.allclose(kinds / kinds.sum(), [0.8, 0.1, 0.1], atol=0.015)


def test_parameter_count():
    """BERT-base with the cased vocabulary and the MLM head (HF BertForMaskedLM,
    108,340,804) + the SBO head: 32 x 768 positions, 3h x h and h x h layers with
    biases, two LayerNorms (2,388,480)."""
    info = loop.describe(load_config("spanbert_base.py"))
    assert info["params"] == 108_340_804 + 2_388_480
    assert (info["seq_len"], info["global_batch_size"], info["total_steps"]) == (
        512, 256, 2_400_000)


@pytest.mark.slow
def test_loss_falls_and_sharded_equals_unsharded(tmp_path):
    quiet = {"model.dropout_rate": 0.0, "model.attention_dropout_rate": 0.0}
    loop.train(tiny_spanbert_config(**quiet), str(tmp_path / "one"), devices=jax.devices()[:1])
    loop.train(tiny_spanbert_config(**quiet, **{"mesh.data": 2, "mesh.fsdp": 2,
                                                "mesh.tensor": 2}), str(tmp_path / "mesh"))
    one, mesh = read_metrics(tmp_path / "one"), read_metrics(tmp_path / "mesh")
    np.testing.assert_allclose([r["loss"] for r in one], [r["loss"] for r in mesh],
                               rtol=0, atol=1e-5)
    mlm = [r["mlm_loss"] for r in one]
    sbo = [r["sbo_loss"] for r in one]
    assert np.mean(mlm[-4:]) < mlm[0] - 1.5, mlm  # from log(4096) = 8.3
    assert np.mean(sbo[-4:]) < sbo[0] - 1.5, sbo


def test_stats_command(shared_data):
    vocab = shared_data / "tokenizers" / "bert-base-uncased" / "vocab.txt"
    out = run_module("pretrainx.data", [
        "--config=configs/spanbert_base.py", "--stats", "--num_batches=4", "--show=1",
        "--config.global_batch_size=16", f"--config.data.tokenizer={vocab}",
        "--config.data.lower_case=True", "--config.model.vocab_size=30522",
        f"--config.data.train_files={PRIDE}"], cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    stats = json.loads(out.stdout.strip().splitlines()[-1])
    assert "--- row 0" in out.stderr and "[MASK] [MASK]" in out.stderr
    assert stats["objective"] == "spanbert"
    assert abs(stats["masked_fraction"] - 0.15) < 0.01
    assert 3.0 < stats["mean_span_words"] < 3.8  # drawn 3.8, some cut short
    assert abs(stats["mask_span_fraction"] - 0.8) < 0.06
