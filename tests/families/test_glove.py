"""GloVe (pretrainx/families/glove): co-occurrence counts as glove.c counts them, the
weighted least-squares cost and AdaGrad steps equal to mittens' (a numpy GloVe) on the
same counts from the same start, the cost falling on the bundled books through
`python -m pretrainx.main`, and the export read by gensim in both formats."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from conftest import ALICE, load_config, override, read_metrics
from pretrainx import interop, objectives
from pretrainx.data.tokenizers import load_tokenizer
from pretrainx.errors import UserError
from pretrainx.families.glove import cooccurrence
from pretrainx.families.glove import model as glove


def test_pairs_add_one_over_their_distance_both_ways_within_a_sentence():
    """By hand, window 2: in [5 6 7] (5,6) and (6,7) are at 1 and (5,7) at 2; [5 6]
    adds another 1 to (5,6); nothing crosses from one sentence to the next."""
    words, contexts, counts = cooccurrence.cooccurrence([[5, 6, 7], [5, 6]], 2, 10)
    got = {(int(i), int(j)): float(x) for i, j, x in zip(words, contexts, counts)}
    assert got == {(5, 6): 2.0, (6, 5): 2.0, (6, 7): 1.0, (7, 6): 1.0, (5, 7): 0.5, (7, 5): 0.5}


def _alice_counts(words: int = 4000):
    """Counts over the start of Alice with its own vocabulary (ids made dense 0..V-1)."""
    tokenizer = load_tokenizer(str(load_config("glove.py", "cpu").data.tokenizer),
                               lower_case=False)
    text = open(ALICE, encoding="utf-8").read()[20_000:]
    ids = np.asarray(tokenizer.encode(text)[:words])
    known, dense = np.unique(ids, return_inverse=True)
    sentences = np.split(dense, np.flatnonzero(np.isin(known[dense], tokenizer.special_ids())))
    words_, contexts, x = cooccurrence.cooccurrence(sentences, 10, known.size)
    return known.size, words_, contexts, x


@pytest.mark.slow
def test_cost_and_adagrad_steps_equal_mittens_on_the_same_counts():
    """mittens (a numpy GloVe, full-batch AdaGrad from accumulators of 0.1) and our
    model, cost and optax's AdaGrad, from the same tables, on one batch of every entry:
    the same cost at each of 5 steps and the same vectors after them."""
    mittens = pytest.importorskip("mittens.np_mittens")
    vocab, words, contexts, x = _alice_counts()
    dim, rng = 16, np.random.default_rng(0)
    start = {k: rng.uniform(-0.5 / dim, 0.5 / dim, size=(vocab, n))
             for k, n in (("W", dim), ("C", dim), ("bw", 1), ("bc", 1))}
    dense = np.zeros((vocab, vocab))
    dense[words, contexts] = x
    theirs = mittens.GloVe(n=dim, xmax=100, alpha=0.75, max_iter=5, learning_rate=0.05,
                           display_progress=0, test_mode=True)
    theirs.fit(dense, fixed_initialization={k: v.copy() for k, v in start.items()})

    cfg = objectives.default_config("glove")
    cfg.model.update(vocab_size=vocab, embedding_size=dim)
    model, objective = glove.GloVe(cfg.model), cooccurrence.GloVeObjective(cfg, None)
    params = {"words": {"embedding": start["W"]}, "contexts": {"embedding": start["C"]},
              "word_bias": {"embedding": start["bw"]},
              "context_bias": {"embedding": start["bc"]}}
    params = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float32), params)
    batch = {"word_ids": words[None], "context_ids": contexts[None], "counts": x[None],
             "entry_weights": np.ones((1, x.size))}

    def cost(p):
        return objective.loss_sums(model.apply({"params": p}, batch), batch)["loss_sum"]

    tx = optax.adagrad(0.05, initial_accumulator_value=0.1, eps=0.0)
    state, ours = tx.init(params), []
    for _ in range(5):
        value, grads = jax.value_and_grad(cost)(params)
        ours.append(float(value))
        updates, state = tx.update(grads, state, params)
        params = optax.apply_updates(params, updates)
    # float32 here, float64 there
    np.testing.assert_allclose(ours, theirs.errors, rtol=1e-5)
    np.testing.assert_allclose(params["words"]["embedding"], theirs.W, atol=1e-5)
    np.testing.assert_allclose(params["context_bias"]["embedding"], theirs.bc, atol=1e-5)
    assert ours[-1] < ours[0]


def _tiny(**overrides):
    c = load_config("glove.py", "cpu")
    return override(c, {"total_steps": 400, "log_every": 20, "eval_every": 400,
                        "checkpoint_every": 400, "eval_steps": 4, "model.embedding_size": 32,
                        **overrides})


@pytest.mark.slow
def test_cost_falls_on_the_books_and_the_export_reads_in_gensim(tmp_path):
    """python -m pretrainx.main's loop: the cost per entry falls on the two books (measured
    0.071 over the first 20 steps, 0.017 over the last; the unseen Alice's
    co-occurrences are evaluated, a noisy figure this early), and
    the export holds exactly the vocabulary's trained words in glove.txt (no header)
    and word2vec's text and binary files, the same vectors in each."""
    from pretrainx.train import loop
    from pretrainx.families.glove import vectors
    workdir = tmp_path / "run"
    loop.train(_tiny(), str(workdir), devices=jax.devices()[:1])
    costs = [r["cost"] for r in read_metrics(workdir)]
    held_out = read_metrics(workdir, split="eval")[-1]["cost"]
    # 400 steps of 4,096 entries: two passes over the books' 730,871
    assert costs[-1] < costs[0] / 3 and 0 < held_out < 1, (costs, held_out)
    pretrained = interop.load(str(workdir))
    written = vectors.export(pretrained, str(tmp_path / "out"))
    assert written == ["glove.txt", "vectors.txt", "vectors.bin"]
    words, table = vectors.trained_words(pretrained)
    assert len(words) == 3620  # the books' words seen 5 times or more
    keyed = pytest.importorskip("gensim.models").KeyedVectors
    glove_file = keyed.load_word2vec_format(str(tmp_path / "out" / "glove.txt"), no_header=True)
    binary = keyed.load_word2vec_format(str(tmp_path / "out" / "vectors.bin"), binary=True)
    assert list(glove_file.index_to_key) == list(binary.index_to_key) == words
    np.testing.assert_allclose(glove_file.vectors, table, atol=1e-6)
    np.testing.assert_allclose(binary.vectors, table, atol=0)


def test_several_sources_are_refused_in_one_line():
    cfg = _tiny()
    cfg.data.train_files = cfg.data.train_files.replace(",", ";")
    with pytest.raises(UserError, match="GloVe fits one co-occurrence matrix"):
        objectives.validate(cfg)
