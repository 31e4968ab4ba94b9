"""Packed BERT pairs (Krell et al. 2021): several [CLS] A [SEP] B [SEP] examples a row
give each example the losses it gets alone, leave less padding, and train."""

import json

import jax
import numpy as np
import optax
import pytest
from flax import linen as nn

from cli_fork import run_module
from conftest import ALICE, REPO, load_config, override, read_metrics
from pretrainx import config as config_lib
from pretrainx import objectives
from pretrainx.data import packing
from pretrainx.data.tokenizers import load_tokenizer
from pretrainx.objectives import packed_pairs
from pretrainx.objectives import rows as rows_lib
from pretrainx.train import loop

SPM = str(REPO / "pretrainx" / "assets" / "spm_4k.model")
# float32 compute: ALBERT's and RoBERTa's recipes compute in bfloat16
SMALL = {"num_layers": 2, "hidden_size": 64, "num_heads": 4, "mlp_dim": 128,
         "dropout_rate": 0.0, "attention_dropout_rate": 0.0, "dtype": "float32"}


def _config(**overrides):
    c = load_config("quickstart.py")
    c.model.update(SMALL)
    return override(c, {"seq_len": 128, "data.max_predictions_per_seq": 20,
                        "data.short_seq_prob": 0.5, "data.dupe_factor": 1,
                        "data.train_files": ALICE, "data.eval_files": "", **overrides})


def _albert(**overrides):
    c = load_config("albert_base.py")
    c.model.update(SMALL, embedding_size=32, vocab_size=4096)
    return override(c, {"seq_len": 128, "data.max_predictions_per_seq": 20,
                        "data.short_seq_prob": 0.5, "data.dupe_factor": 1,
                        "data.tokenizer": SPM, "data.train_files": ALICE, **overrides})


def _roberta(gpt2, **overrides):
    c = load_config("roberta_base.py")
    c.model.update(SMALL, max_position_embeddings=130)
    return override(c, {"seq_len": 128, "data.max_predictions_per_seq": 20,
                        "data.tokenizer": gpt2, "data.train_files": ALICE, **overrides})


# objective -> (config, label key, pair logits: None for single segments)
CASES = {"bert": (_config, "next_sentence_label"),
         "albert": (_albert, "sentence_order_label"),
         "roberta": (_roberta, None)}


def _build(name, shared_data, **overrides):
    make, label = CASES[name]
    if name == "roberta":
        gpt2 = str(shared_data / "tokenizers" / "gpt2")
        cfg = make(gpt2, **overrides)
        return cfg, objectives.build(cfg, load_tokenizer(gpt2)), label
    cfg = make(**overrides)
    tokenizer = load_tokenizer(cfg.data.tokenizer, lower_case=True)
    return cfg, objectives.build(cfg, tokenizer), label


@pytest.mark.parametrize("name", list(CASES))
def test_packed_examples_get_the_losses_they_get_alone(name, shared_data):
    """Examples packed three to a row (segment ids, restarting positions and types, each
    example's masks at its offset, for pairs the NSP / SOP head at each [CLS]) give every
    example the MLM (and pair) losses of the same example in a row of its own: float32,
    within 1e-5. BERT's NSP pairs, ALBERT's sentence-order pairs, RoBERTa's rows kept
    inside their documents; masks from the packed transform itself."""
    cfg, single, label = _build(name, shared_data)
    _, packed_objective, _ = _build(name, shared_data, **{"data.pack_examples": True})
    tokenizer = single.tokenizer
    phase = config_lib.phases(cfg)[0]
    docs = single.corpus.documents(ALICE)
    if label is None:  # the rows the packed objective packs: each ends with its document
        examples = rows_lib.sentence_rows(docs, cfg, phase, True, 0, tokenizer,
                                          cross_documents=False)
    else:
        examples = single.examples_from_documents(docs, phase, train=True)
    short = [e for e in examples if 8 <= e["input_ids"].size <= 40][:9]
    assert len(short) == 9
    if label is not None:
        assert len({int(e[label]) for e in short}) == 2
    rows = packing.pack_pairs(short, 128, 3, label)
    assert len(rows) == 3 and all(len(r["lengths"]) == 3 for r in rows)
    alone_fn, packed_fn = single.transform(phase, True), packed_objective.transform(phase, True)
    packed = [packed_fn(r, np.random.default_rng(i)) for i, r in enumerate(rows)]
    alone = []
    for i, r in enumerate(rows):  # the same generators the packed transform drew
        rngs = packed_pairs.row_rngs(np.random.default_rng(i), 3)
        alone += [alone_fn(short[m], g) for m, g in zip(_members(short, r), rngs)]
    stack = lambda xs: {k: np.stack([x[k] for x in xs]) for k in xs[0]}  # noqa: E731
    packed_batch, alone_batch = stack(packed), stack(alone)
    model = packed_objective.model
    params = nn.unbox(jax.jit(model.init)(jax.random.key(0), alone_batch)["params"])
    apply = jax.jit(model.apply)  # eagerly, every op of every layer compiles alone
    p_out = apply({"params": params}, packed_batch)
    a_out = apply({"params": params}, alone_batch)
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
    if label is not None:
        p_pair = optax.softmax_cross_entropy_with_integer_labels(
            p_out["nsp_logits"], packed_batch[label]).reshape(9)
        a_pair = optax.softmax_cross_entropy_with_integer_labels(
            a_out["nsp_logits"], alone_batch[label])
        np.testing.assert_allclose(np.asarray(p_pair), np.asarray(a_pair), rtol=0, atol=1e-5)
        np.testing.assert_array_equal(packed_batch[label].reshape(9), alone_batch[label])
    assert (packed_batch["attention_mask"].max(axis=1) == 3).all()
    assert packed_batch["masked_lm_positions"].shape[1] == 20 + 3  # the row's budget + 1 each
    if name == "albert":  # n-gram starts moved with their example, lengths kept
        for key in ("ngram_start", "ngram_words"):
            assert sorted(packed_batch[key][packed_batch["masked_lm_weights"] > 0]) == sorted(
                np.concatenate([_offset(alone_batch, key, i, short, rows) for i in range(9)]))


def _offset(batch, key, i, short, rows):
    """Example i's per-prediction `key`, moved by its offset in its packed row when the
    key is a position."""
    values = batch[key][i][batch["masked_lm_weights"][i] > 0]
    if key != "ngram_start":
        return values
    row, e = divmod(i, 3)
    return values + int(rows[row]["lengths"][:e].sum())


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
    out = run_module("pretrainx.data", [
        "--config=configs/quickstart.py", "--stats", "--num_batches=4", "--show=1",
        "--config.seq_len=128", "--config.data.max_predictions_per_seq=20",
        f"--config.data.train_files={ALICE}", *extra], cwd=REPO)
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


@pytest.mark.slow
@pytest.mark.parametrize("name,learning_rate", [("albert", 0.3), ("roberta", 1e-2)])
def test_packed_sop_pairs_and_document_rows_train(name, learning_rate, shared_data, tmp_path):
    """ALBERT's packed sentence-order pairs and RoBERTa's packed document rows: 12 steps
    with finite, falling losses; the SOP accuracy is read over the examples the rows hold."""
    cfg, _, _ = _build(name, shared_data, **{
        "total_steps": 12, "log_every": 1, "eval_every": 1000, "checkpoint_every": 12,
        "global_batch_size": 8, "seq_len": 64, "data.max_predictions_per_seq": 10,
        "data.pack_examples": True, "optimizer.warmup_steps": 2,
        "optimizer.learning_rate": learning_rate})
    loop.train(cfg, str(tmp_path / name), devices=jax.devices()[:1])
    records = read_metrics(tmp_path / name)
    losses = [r["loss"] for r in records]
    assert np.isfinite(losses).all() and np.mean(losses[-3:]) < losses[0] - 0.5, losses
    if name == "albert":
        assert all(0 <= r["sop_accuracy"] <= 1 for r in records)
