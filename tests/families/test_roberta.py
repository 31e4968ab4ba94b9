"""RoBERTa: byte-level ids in fairseq's layout, FULL-SENTENCES rows, dynamic 15%
masking with 80/10/10, the base model's size, training on real text."""

import json

import jax
import numpy as np
import pytest

from cli_fork import run_module
from conftest import REPO, load_config, read_metrics, shrink_recipe
from pretrainx import config as config_lib
from pretrainx import objectives
from pretrainx.data import pipeline
from pretrainx.data.tokenizers import load_tokenizer
from pretrainx.objectives.rows import pack_sentences
from pretrainx.train import loop

BOOKS = REPO / "pretrainx" / "assets" / "text"
ALICE = str(BOOKS / "pg11_alice_in_wonderland.txt")


@pytest.fixture(scope="module")
def vocab(shared_data):
    return str(shared_data / "tokenizers" / "gpt2")


def tiny_roberta_config(vocab, **overrides):
    return shrink_recipe("roberta_base.py", learning_rate=1e-2,
                         model={"max_position_embeddings": 66},
                         **{"data.tokenizer": vocab, **overrides})


@pytest.fixture(scope="module")
def objective(vocab):
    cfg = tiny_roberta_config(vocab, seq_len=128, **{"model.max_position_embeddings": 130,
                                                     "data.max_predictions_per_seq": 20})
    return objectives.build(cfg, load_tokenizer(vocab)), config_lib.phases(cfg)[0]


def test_ids_take_fairseqs_layout(objective):
    tok = objective[0].tokenizer
    assert (tok.cls_id, tok.pad_id, tok.sep_id, tok.unk_id) == (0, 1, 2, 3)
    assert tok.mask_id == 50264 and tok.vocab_size == 50265  # as roberta-base
    ids = tok.encode("Alice was beginning to get very tired")
    assert min(ids) >= 4 and tok.decode([0] + ids + [2]) == "Alice was beginning to get very tired"
    assert set(tok.special_ids()) == {0, 1, 2, 3, 50261, 50262, 50263, 50264}


def test_a_roberta_vocab_json_loads_with_its_own_ids(objective, vocab, tmp_path):
    """HF's roberta-base files (vocab.json with <s> <pad> </s> <unk> <mask>) keep their ids."""
    import shutil
    from pretrainx.data import bpe
    layout = objective[0].tokenizer
    pieces = json.load(open(f"{vocab}/vocab.json", encoding="utf-8"))
    table = {p: i + 4 for p, i in pieces.items()}
    table.update({"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "<mask>": 50264})
    (tmp_path / "vocab.json").write_text(json.dumps(table), encoding="utf-8")
    shutil.copyfile(f"{vocab}/merges.txt", tmp_path / "merges.txt")
    tok = load_tokenizer(str(tmp_path))
    assert bpe.roberta_ids(tok) is tok
    assert (tok.cls_id, tok.pad_id, tok.sep_id, tok.unk_id, tok.mask_id) == (0, 1, 2, 3, 50264)
    text = "“Who are you?” said the Caterpillar."
    assert tok.encode(text) == layout.encode(text)
    assert set(tok.special_ids()) >= {0, 1, 2, 3, 50264}


def test_full_sentences_rows_are_full_and_cross_documents(objective):
    obj, phase = objective
    tok = obj.tokenizer
    docs = obj.corpus.documents(ALICE)
    capacity = 510  # the paper's 512 - <s> - </s>
    rows = pack_sentences(docs, capacity, tok.sep_id)
    # Whole sentences in order: the rows are the documents' stream, cut.
    sentences = [(np.asarray(s), d) for d, doc in enumerate(docs) for s in doc]
    np.testing.assert_array_equal(np.concatenate([r[r != tok.sep_id] for r in rows]),
                                  np.concatenate([s for s, _ in sentences]))
    i, rem = 0, sentences[0][0].size
    for number, row in enumerate(rows):
        assert row[0] != tok.sep_id and row[-1] != tok.sep_id
        seps = np.flatnonzero(row == tok.sep_id)
        take = row.size - seps.size
        docs_in_row = {sentences[i][1]}
        while take:
            t = min(rem, take)
            rem, take = rem - t, take - t
            if rem == 0 and i + 1 < len(sentences):
                i += 1
                rem = sentences[i][0].size
                docs_in_row.add(sentences[i][1]) if take else None
        assert seps.size == len(docs_in_row) - 1  # one </s> per document boundary
        if number < len(rows) - 1:
            # Rows end at a sentence's end unless it alone was longer than a row, and
            # are FULL: the next sentence (after a separator) would not have fit.
            whole = sentences[i][0].size
            assert rem == whole or whole > capacity
            boundary = int(sentences[i][1] != sentences[i - 1][1])
            assert row.size + boundary + rem > capacity
    lengths = np.array([r.size for r in rows])
    assert lengths[:-1].mean() > 0.9 * capacity
    crossing = [r for r in rows if (r == tok.sep_id).any()]
    assert len(crossing) >= (len(docs) - 1) // 2  # most boundaries fall inside a row
    examples = obj.examples_from_documents(docs, phase, train=False)
    assert all(e["input_ids"][0] == 0 and e["input_ids"][-1] == 2 for e in examples)
    assert all(e["input_ids"][1] != 2 and e["input_ids"][-2] != 2 for e in examples)
    assert max(e["input_ids"].size for e in examples) <= phase.seq_len


def test_dynamic_masking_statistics(objective):
    """15% of the non-special tokens, 80/10/10, specials never touched, and a row seen
    again in the next epoch gets another mask."""
    obj, phase = objective
    tok = obj.tokenizer
    examples = obj.examples_from_documents(obj.corpus.documents(ALICE), phase, train=True)
    n = len(examples)
    ds = pipeline.make_dataset(examples, obj.transform(phase, train=True), 1, seed=3,
                               shuffle=False)
    chosen = candidates = n_mask = n_random = n_kept = same = 0
    specials = tok.special_ids()
    for i in range(3 * n):
        b = {k: v[0] for k, v in ds[i].items()}
        original = examples[i % n]["input_ids"]
        w = b["masked_lm_weights"] > 0
        pos, ids = b["masked_lm_positions"][w], b["masked_lm_ids"][w]
        np.testing.assert_array_equal(ids, original[pos])
        assert not np.isin(original[pos], specials).any()
        new = b["input_ids"][pos]
        n_mask += int((new == tok.mask_id).sum())
        n_kept += int((new == ids).sum())
        n_random += int(((new != tok.mask_id) & (new != ids)).sum())
        assert not np.isin(new[new != tok.mask_id], specials).any()
        chosen += int(w.sum())
        candidates += int((~np.isin(original, specials)).sum())
        if i >= n:
            before = {k: v[0] for k, v in ds[i - n].items()}
            same += np.array_equal(before["masked_lm_positions"], b["masked_lm_positions"])
    assert abs(chosen / candidates - 0.15) < 0.005
    assert abs(n_mask / chosen - 0.8) < 0.02
    assert abs(n_random / chosen - 0.1) < 0.015
    assert abs(n_kept / chosen - 0.1) < 0.015
    assert same == 0  # a new mask every epoch


@pytest.mark.parametrize("size,published", [("base", 124_645_632), ("large", 355_359_744)])
def test_parameter_counts(size, published):
    """HF's roberta-base / -large (with a pooler, without the MLM head); ours is the
    encoder + the MLM head, as HF's RobertaForMaskedLM (124,697,433 for base)."""
    cfg = load_config("roberta.py", size)
    info = loop.describe(cfg)
    assert abs(info["params"] - published) / published < 0.01, info["params"]
    if size == "base":
        assert info["params"] == 124_697_433
        assert (info["seq_len"], info["global_batch_size"], info["total_steps"]) == (
            512, 8192, 500_000)
        o = cfg.optimizer
        assert (o.learning_rate, o.b1, o.b2, o.eps, o.weight_decay, o.warmup_steps) == (
            6e-4, 0.9, 0.98, 1e-6, 0.01, 24_000)


@pytest.mark.slow
def test_loss_falls_and_sharded_equals_unsharded(vocab, tmp_path):
    quiet = {"model.dropout_rate": 0.0, "model.attention_dropout_rate": 0.0, "seq_len": 32,
             "data.max_predictions_per_seq": 5, "total_steps": 12}
    loop.train(tiny_roberta_config(vocab, **quiet, checkpoint_every=12), str(tmp_path / "one"),
               devices=jax.devices()[:1])
    # 50,265 ids do not split over a tensor axis (model.vocab_size=50272 would): data x fsdp.
    loop.train(tiny_roberta_config(vocab, **quiet, **{"mesh.data": 2, "mesh.fsdp": 4}),
               str(tmp_path / "mesh"))
    a = [r["loss"] for r in read_metrics(tmp_path / "one")]
    b = [r["loss"] for r in read_metrics(tmp_path / "mesh")]
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
    assert np.mean(a[-4:]) < a[0] - 1.5, a  # from log(50265) = 10.8 towards English


@pytest.mark.slow
def test_glue_finetunes_from_a_roberta_workdir(vocab, shared_data, tmp_path):
    """A RoBERTa run fine-tunes on sentence pairs (RTE) with the ids it trained on
    (fairseq's layout of GPT-2's files: <s> = 0) and no NaN from the second segment's
    type id on a one-row type table; the pooler and classifier start fresh."""
    from pretrainx import interop
    from pretrainx.finetune import loop as finetune_loop
    from pretrainx.finetune.config import finetune_config
    run = str(tmp_path / "run")
    loop.train(tiny_roberta_config(vocab, seq_len=32, total_steps=2, checkpoint_every=2,
                                   **{"data.max_predictions_per_seq": 5}), run,
               devices=jax.devices()[:1])
    pretrained = interop.load(run)
    assert (pretrained.family, pretrained.head) == ("roberta", "mlm")
    cfg = finetune_config()
    cfg.update_from_flattened_dict({
        "init_from": run, "task": "rte", "data.glue_dir": str(shared_data / "glue"),
        "seq_len": 64, "global_batch_size": 16, "epochs": 1, "data.max_train_examples": 32,
        "data.max_eval_examples": 32})
    out = finetune_loop.train(cfg, str(tmp_path / "ft"), devices=jax.devices()[:1])
    losses = [r["loss"] for r in read_metrics(tmp_path / "ft") if "loss" in r]
    assert losses and np.isfinite(losses).all() and 0 <= out["best"]["accuracy"] <= 1
    tuned = interop.load(str(tmp_path / "ft"))
    assert tuned.family == "roberta" and tuned.head == "classify"
    setup = finetune_loop._Setup(cfg)
    assert (setup.tokenizer.cls_id, setup.tokenizer.pad_id, setup.tokenizer.sep_id) == (0, 1, 2)
    row = setup.data.train["input_ids"][0]
    assert row[0] == 0 and int(setup.data.train["token_type_ids"][0].max()) == 1


def test_stats_command(vocab):
    out = run_module("pretrainx.data", [
        "--config=configs/roberta_base.py", "--stats", "--num_batches=4", "--show=1",
        "--config.global_batch_size=16", f"--config.data.tokenizer={vocab}",
        f"--config.data.train_files={ALICE}"], cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    stats = json.loads(out.stdout.strip().splitlines()[-1])
    assert "--- row 0" in out.stderr and "<mask>" in out.stderr
    assert stats["objective"] == "roberta"
    assert abs(stats["masked_fraction"] - 0.15) < 0.01
    assert stats["packing_efficiency"] > 0.9  # FULL-SENTENCES rows of 512
    assert stats["rows_crossing_documents_fraction"] > 0
    for key in ("mask_token_fraction", "random_token_fraction", "kept_fraction"):
        assert key in stats
