"""ALBERT: n-gram masking and sentence-order pairs as the paper and google-research/albert
set them, factorised embeddings, cross-layer sharing, the base model's size, training
on real text (sharded == unsharded) and the `--stats` figures."""

import jax
import numpy as np
import pytest

from conftest import REPO, load_config, read_metrics, shrink_recipe
from pretrainx import config as config_lib
from pretrainx import objectives
from pretrainx.data import pipeline
from pretrainx.data.tokenizers import load_tokenizer
from pretrainx.errors import UserError
from pretrainx.families.albert.albert_mlm_sop import (IN_ORDER, SWAPPED, create_sop_examples,
                                                 mask_ngrams, ngram_probs)
from pretrainx.train import loop

ASSETS = REPO / "pretrainx" / "assets"
SPM = str(ASSETS / "spm_4k.model")
PRIDE = str(ASSETS / "text" / "pg1342_pride_and_prejudice.txt")


def tiny_albert_config(**overrides):
    # LAMB's lr 0.3: a step moves each tensor by lr x its norm.
    return shrink_recipe("albert_base.py", learning_rate=0.3,
                         # two layers: one set of weights shared by both is the claim
                         model={"embedding_size": 32, "vocab_size": 4096, "num_layers": 2},
                         **{"data.tokenizer": SPM, "data.dupe_factor": 1, **overrides})


@pytest.fixture(scope="module")
def book():
    """Pride and Prejudice in the 4k lower-cased SentencePiece, and the objective at 128."""
    cfg = tiny_albert_config(seq_len=128, **{"data.max_predictions_per_seq": 20})
    objective = objectives.build(cfg, load_tokenizer(SPM))
    return objective, objective.corpus.documents(PRIDE), config_lib.phases(cfg)[0]


def _is_slice(part, whole) -> bool:
    if not 0 < part.size <= whole.size:
        return False
    windows = np.lib.stride_tricks.sliding_window_view(whole, part.size)
    return bool((windows == part).all(axis=1).any())


def test_sentence_order_pairs(book):
    """Half the pairs swapped; A and B are consecutive whole-sentence segments of one
    document, in order (label 0) or as B A (label 1); no segment from elsewhere."""
    objective, docs, _ = book
    tok = objective.tokenizer
    rng = np.random.default_rng(0)
    examples = [e for _ in range(3) for e in create_sop_examples(
        docs, 128, 0.1, rng, tok.cls_id, tok.sep_id)]
    assert len(examples) > 2000
    labels = np.array([e["sentence_order_label"] for e in examples])
    assert set(labels) == {IN_ORDER, SWAPPED}
    assert abs(labels.mean() - 0.5) < 0.025
    whole = 0
    for e in examples:
        (da, a0, a1), (db, b0, b1) = e["a_span"], e["b_span"]
        assert da == db == e["doc_index"]
        if e["sentence_order_label"] == IN_ORDER:
            assert a1 == b0  # B follows A
        else:
            assert b1 == a0  # the row holds the later segment first
        ids, types = e["input_ids"], e["token_type_ids"]
        assert ids.size <= 128 and ids[0] == tok.cls_id and ids[-1] == tok.sep_id
        sep = int(np.flatnonzero(ids == tok.sep_id)[0])
        np.testing.assert_array_equal(types, np.arange(ids.size) > sep)
        seg_a = np.concatenate(docs[da][a0:a1])
        seg_b = np.concatenate(docs[db][b0:b1])
        # The text of the spans, cut at the front or back to fit (truncate_seq_pair).
        assert _is_slice(ids[1:sep], seg_a) and _is_slice(ids[sep + 1:-1], seg_b)
        whole += seg_a.size + seg_b.size + 3 == ids.size
    assert whole > 0.1 * len(examples)
    lengths = np.array([e["input_ids"].size for e in examples])
    # Short: 10% of the targets (uniform in 2..125, so some still fill the row) plus
    # the last pair of a chapter (3% of the rows with short_seq_prob = 0).
    assert 0.08 < np.mean(lengths < 128) < 0.16


def test_ngram_masking_statistics(book):
    """p(n) = 6/11, 3/11, 2/11 for n-grams of whole words; 15% of the tokens; 80/10/10
    per token; specials and unmasked tokens untouched."""
    objective, docs, phase = book
    tok = objective.tokenizer
    specials = tok.special_ids()
    examples = objective.examples_from_documents(docs, phase, train=True)
    rng = np.random.default_rng(0)
    record, masked, candidates, kinds = [], 0, 0, np.zeros(3)
    for e in examples * 2:
        ids = np.full(128, tok.pad_id, np.int32)
        ids[:e["input_ids"].size] = e["input_ids"]
        starts = tok.word_start_mask(ids)
        out = mask_ngrams(ids, rng, vocab_size=tok.vocab_size, mask_id=tok.mask_id,
                          special_ids=specials, word_starts=starts, max_predictions=20,
                          mask_prob=0.15, record=record)
        n = int(out["masked_lm_weights"].sum())
        pos = out["masked_lm_positions"][:n]
        assert np.all(np.diff(pos) > 0) and not np.isin(ids[pos], specials).any()
        np.testing.assert_array_equal(out["masked_lm_ids"][:n], ids[pos])
        unit_start, unit_words = out["ngram_start"][:n], out["ngram_words"][:n]
        for s in np.unique(unit_start):
            unit = pos[unit_start == s]
            end = int(unit[-1]) + 1
            np.testing.assert_array_equal(unit, np.arange(s, end))  # contiguous
            # Whole words (a word also starts after [CLS]/[SEP]: a segment may begin
            # mid-word once truncated), n of them.
            assert starts[s] or np.isin(ids[s - 1], specials)
            assert starts[end] or np.isin(ids[end], specials)
            assert 1 + starts[unit[1:]].sum() == unit_words[unit_start == s][0]
        now = out["input_ids"][pos]
        kinds += [(now == tok.mask_id).sum(), (now == ids[pos]).sum(),
                  ((now != tok.mask_id) & (now != ids[pos])).sum()]
        assert not np.isin(now[now != tok.mask_id], specials).any()
        unmasked = np.ones(128, bool)
        unmasked[pos] = False
        np.testing.assert_array_equal(out["input_ids"][unmasked], ids[unmasked])
        masked += n
        candidates += int((~np.isin(ids, specials)).sum())
    fits, drawn, taken = (np.array(x) for x in zip(*record))
    np.testing.assert_allclose(ngram_probs(3), [6 / 11, 3 / 11, 2 / 11])
    free = fits == 3  # where all three lengths fit, n is drawn from p
    assert free.sum() > 20_000
    hist = np.bincount(drawn[free], minlength=4)[1:] / free.sum()
    np.testing.assert_allclose(hist, ngram_probs(3), atol=0.01)
    units = np.bincount(taken[taken > 0], minlength=4)[1:] / (taken > 0).sum()
    # What gets masked is shorter (0.62 / 0.25 / 0.13 at length 128): as in the
    # original, an n-gram is shortened to fit the budget, and long ones collide more.
    np.testing.assert_allclose(units, ngram_probs(3), atol=0.09)
    assert units[0] > 6 / 11 and units[2] < 2 / 11
    assert abs(masked / candidates - 0.15) < 0.004
    np.testing.assert_allclose(kinds / kinds.sum(), [0.8, 0.1, 0.1], atol=0.012)


def test_masks_are_drawn_at_batch_time(book):
    objective, docs, phase = book
    examples = objective.examples_from_documents(docs[:20], phase, train=True)
    ds = pipeline.make_dataset(examples, objective.transform(phase, train=True), 1, seed=3,
                               shuffle=False)
    n = len(examples)
    same = sum(np.array_equal(ds[i]["masked_lm_positions"], ds[i + n]["masked_lm_positions"])
               for i in range(n))
    assert same < 0.1 * n  # a new mask every epoch


def _shapes(cfg) -> dict:
    """{"bert/token_embed/embedding": shape, ...} of the model's parameters."""
    from flax import traverse_util
    from flax.core import meta
    objective = objectives.build(cfg, tokenizer=None)
    batch = objective.example_batch(1, config_lib.phases(cfg)[0])
    variables = jax.eval_shape(lambda: objective.model.init(jax.random.key(0), batch))
    flat = traverse_util.flatten_dict(meta.unbox(variables["params"]), sep="/")
    return {k: tuple(v.shape) for k, v in flat.items()}


def test_factorised_embeddings_and_shared_layers():
    p = _shapes(tiny_albert_config())
    assert p["bert/token_embed/embedding"] == (4096, 32)
    assert p["bert/position_embed/embedding"] == (512, 32)
    assert p["bert/embed_norm/scale"] == (32,)
    assert p["bert/embedding_projection/kernel"] == (32, 64)
    assert p["mlm_transform/kernel"] == (64, 32) and p["mlm_norm/scale"] == (32,)
    assert {k.split("/")[1] for k in p if k.startswith("bert/layer")} == {"layer_shared"}
    # A shared stack of 12 has the parameters of one layer.
    twelve = loop.describe(tiny_albert_config(**{"model.num_layers": 12}))["params"]
    one = loop.describe(tiny_albert_config(**{"model.num_layers": 1,
                                              "model.share_layers": False}))["params"]
    assert twelve == one
    # Unshared, each layer has its own.
    two = loop.describe(tiny_albert_config(**{"model.share_layers": False}))["params"]
    layer = 4 * (64 * 64 + 64) + 2 * 64 * 128 + 128 + 64 + 4 * 64
    assert two - one == layer


def test_scanned_shared_layers_compute_the_unrolled_ones():
    from pretrainx.families.bert import model as bert
    cfg = tiny_albert_config()
    objective = objectives.build(cfg, tokenizer=None)
    batch = objective.example_batch(2, config_lib.phases(cfg)[0])
    batch["input_ids"] = np.arange(128, dtype=np.int32).reshape(2, 64) * 7 % 4096
    unrolled = bert.BertForPreTraining(cfg.model)
    params = jax.jit(unrolled.init)(jax.random.key(0), batch)["params"]
    scanned = bert.BertForPreTraining(tiny_albert_config(**{"model.scan_layers": True}).model)
    shapes = jax.eval_shape(scanned.init, jax.random.key(0), batch)
    assert (jax.tree_util.tree_map(jax.numpy.shape, {"params": params})
            == jax.tree_util.tree_map(lambda x: x.shape, shapes))
    a = jax.jit(unrolled.apply)({"params": params}, batch)
    b = jax.jit(scanned.apply)({"params": params}, batch)
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=1e-5, atol=1e-5)


def test_parameter_count():
    """ALBERT-base: 11,813,810, HF's AlbertForPreTraining of albert-base-v2 (its
    AlbertModel: 11,683,584; the paper rounds to 12M)."""
    cfg = load_config("albert_base.py")
    info = loop.describe(cfg)
    assert info["params"] == 11_813_810
    assert (info["seq_len"], info["global_batch_size"], info["total_steps"]) == (
        512, 4096, 125_000)
    o, m = cfg.optimizer, cfg.model
    assert (o.name, o.learning_rate, o.warmup_steps, o.weight_decay, o.b1, o.b2, o.eps) == (
        "lamb", 0.00176, 3125, 0.01, 0.9, 0.999, 1e-6)
    assert (m.embedding_size, m.share_layers, m.dropout_rate, m.vocab_size) == (
        128, True, 0.0, 30000)
    assert (cfg.data.short_seq_prob, cfg.data.mask_prob, cfg.data.max_ngram) == (0.1, 0.15, 3)


def test_bad_albert_keys_are_refused():
    with pytest.raises(UserError, match="model.embedding_size"):
        objectives.validate(tiny_albert_config(**{"model.embedding_size": -1}))
    with pytest.raises(UserError, match="data.max_ngram"):
        objectives.validate(tiny_albert_config(**{"data.max_ngram": 0}))


@pytest.mark.slow
def test_loss_falls_and_sharded_equals_unsharded(tmp_path):
    loop.train(tiny_albert_config(), str(tmp_path / "one"), devices=jax.devices()[:1])
    loop.train(tiny_albert_config(**{"mesh.data": 2, "mesh.fsdp": 2, "mesh.tensor": 2}),
               str(tmp_path / "mesh"))
    one, mesh = read_metrics(tmp_path / "one"), read_metrics(tmp_path / "mesh")
    np.testing.assert_allclose([r["loss"] for r in one], [r["loss"] for r in mesh],
                               rtol=0, atol=1e-4)
    mlm = [r["mlm_loss"] for r in one]
    assert np.mean(mlm[-4:]) < mlm[0] - 1.5, mlm  # from log(4096) = 8.3
    assert all(np.isfinite(r["sop_loss"]) for r in one)


def test_stats_figures():
    """`python -m pretrainx.data --stats` for ALBERT (its batch_statistics)."""
    from pretrainx.prepare.data_cli import batch_statistics
    cfg = tiny_albert_config(seq_len=512, global_batch_size=32,
                             **{"data.max_predictions_per_seq": 80,
                                "data.train_files": PRIDE})
    stats = batch_statistics(cfg, num_batches=4)
    assert stats["objective"] == "albert"
    assert abs(stats["masked_fraction"] - 0.15) < 0.01
    assert abs(stats["ngram_1_fraction"] - 6 / 11) < 0.05
    assert abs(stats["ngram_2_fraction"] - 3 / 11) < 0.05
    assert abs(stats["ngram_3_fraction"] - 2 / 11) < 0.05
    assert abs(stats["mask_token_fraction"] - 0.8) < 0.03
    assert 0.35 < stats["sop_swapped_fraction"] < 0.65  # 128 rows
