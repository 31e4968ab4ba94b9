"""Masked diffusion (MDLM): the rates of a batch are the paper's low-discrepancy draw and
the same on a second pass; rows of the books are masked at their rate, only real
non-special tokens, every one the mask; the 1/t weight makes the loss the per-token
negative log-likelihood in expectation; a run trains, reports its bound as a perplexity
and resumes bit for bit; MLM and MDLM switch in one run; the sampler fills a canvas in
T steps in the order its remasking rule says, deterministic under a seed, and writes the
answer a model that knows it gives; bad input in one line."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import load_config, override, read_metrics
from pretrainx import objectives
from pretrainx.errors import UserError
from pretrainx.objectives import mdlm


def _quickstart(**keys):
    base = {"total_steps": 8, "global_batch_size": 8, "seq_len": 32, "log_every": 1,
            "eval_every": 8, "eval_steps": 2, "checkpoint_every": 8, "keep_checkpoints": 5,
            "model.num_layers": 2, "model.hidden_size": 32, "model.num_heads": 2,
            "model.mlp_dim": 64, "model.local_attention": 8, "model.max_position_embeddings": 64,
            "data.max_predictions_per_seq": 32, "optimizer.warmup_steps": 1,
            "optimizer.decay_steps": 2}
    return override(load_config("mdlm.py", "quickstart"), {**base, **keys})


def test_a_batchs_rates_are_evenly_spread_and_drawn_again_alike():
    rates = np.array([mdlm.rate(3, i, 16) for i in range(64)])
    for b in range(4):
        batch = np.sort((rates[16 * b:16 * (b + 1)] - mdlm.EPS) / (1 - mdlm.EPS))
        np.testing.assert_allclose(np.diff(batch), 1 / 16, atol=1e-9)  # one per stratum
    assert len({round(r, 9) for r in rates[::16]}) == 4  # each batch its own offset
    assert mdlm.rate(3, 37, 16) == rates[37]
    assert rates.min() >= mdlm.EPS and rates.max() <= 1.0


def test_rows_are_masked_at_their_rate_on_the_books():
    cfg = _quickstart(seq_len=128, **{"data.max_predictions_per_seq": 128})
    tok, objective = objectives.for_run(cfg)
    phase = types.SimpleNamespace(seq_len=128, global_batch_size=32, max_predictions=128,
                                  index=1)
    rows = objective.examples(cfg.data.train_files, phase, train=True)[:256]
    fn = objective.transform(phase, train=True)
    assert fn.indexed
    specials = np.asarray(tok.special_ids())
    got, want = 0.0, 0.0
    for i, row in enumerate(rows):
        out = fn(row, np.random.default_rng(i), i)
        chosen = out["masked_lm_weights"] > 0
        positions = out["masked_lm_positions"][chosen]
        assert (out["input_ids"][positions] == tok.mask_id).all()  # no 80/10/10
        assert not np.isin(out["masked_lm_ids"][chosen], specials).any()
        assert (out["attention_mask"][positions] > 0).all()
        np.testing.assert_allclose(out["masked_lm_weights"][chosen], 1 / out["mask_rate"],
                                   rtol=1e-6)
        original = np.pad(row["input_ids"], (0, 128 - row["input_ids"].size),
                          constant_values=tok.pad_id)
        changed = np.flatnonzero(out["input_ids"] != original)
        assert set(changed) <= set(positions)
        got += chosen.sum()
        want += out["mask_rate"] * out["mdlm_tokens"]
    assert abs(got / want - 1) < 0.03


def test_the_weighted_loss_is_the_per_token_nll_in_expectation():
    """A head that gives every token the same cross entropy c: over the low-discrepancy
    rates and their Bernoulli masks, bound / tokens = c (MDLM's ELBO, linear schedule)."""
    rng = np.random.default_rng(0)
    rows, length, vocab = 512, 64, 11
    ids = rng.integers(0, vocab, (rows, length))
    maskable = np.ones(length, bool)
    batches = [mdlm.mask_row(ids[i], maskable, mdlm.rate(0, i, 64), rng, vocab - 1, length)
               for i in range(rows)]
    batch = {k: jnp.asarray(np.stack([b[k] for b in batches])) for k in batches[0]}
    logits = jnp.zeros((rows, length, vocab))  # uniform: c = ln(vocab)
    sums = mdlm.MdlmLoss().loss_sums({"mlm_logits": logits}, batch)
    norms = mdlm.MdlmLoss().normalizers(batch)
    bound = float(mdlm.MdlmLoss().loss(sums, norms))
    assert abs(bound / np.log(vocab) - 1) < 0.02


@pytest.mark.slow
def test_a_run_reports_its_bound_and_resumes_bit_for_bit(tmp_path):
    cfg = _quickstart()
    one = jax.devices()[:1]
    from pretrainx.train import loop
    loop.train(cfg, str(tmp_path / "straight"), devices=one)
    evals = read_metrics(tmp_path / "straight", split="eval")
    assert evals[-1]["bound_perplexity"] == pytest.approx(np.exp(evals[-1]["loss"]), rel=1e-6)
    loop.train(cfg, str(tmp_path / "resumed"), stop_at=5, devices=one)
    loop.train(cfg, str(tmp_path / "resumed"), devices=one)
    assert [r["loss"] for r in read_metrics(tmp_path / "straight")] == \
        [r["loss"] for r in read_metrics(tmp_path / "resumed")]


@pytest.mark.slow
def test_mlm_then_mdlm_in_one_run(tmp_path):
    import ml_collections
    from pretrainx.train import loop
    cfg = _quickstart()
    cfg.objective = "modernbert"
    cfg.phase_order = "mlm,mdlm"
    cfg.phases.mlm = ml_collections.ConfigDict({"steps": 4})
    cfg.phases.mdlm = ml_collections.ConfigDict({"objective": "modernbert_mdlm"})
    loop.train(objectives.validate(cfg), str(tmp_path / "run"), devices=jax.devices()[:1])
    evals = read_metrics(tmp_path / "run", split="eval")
    assert [(e["phase"], "bound_perplexity" in e) for e in evals] == [("mlm", False),
                                                                       ("mdlm", True)]


@pytest.mark.slow
def test_ettins_decoder_then_mdlm_in_one_run(tmp_path):
    """The decoder (causal LM) for 4 steps, then MDLM over the same parameters with the
    attention stated bidirectional: Ettin's decoder turned a diffusion model."""
    import ml_collections
    from pretrainx.train import loop
    cfg = _quickstart(**{"model.causal": True, "model.classifier_pooling": "last"})
    cfg.objective = "modernbert_clm"
    cfg.phase_order = "clm,mdlm"
    cfg.phases.clm = ml_collections.ConfigDict({"steps": 4})
    cfg.phases.mdlm = ml_collections.ConfigDict({
        "objective": "modernbert_mdlm",
        "model": {"causal": False, "classifier_pooling": "cls"}})
    loop.train(objectives.validate(cfg), str(tmp_path / "run"), devices=jax.devices()[:1])
    evals = read_metrics(tmp_path / "run", split="eval")
    assert [(e["phase"], "bound_perplexity" in e) for e in evals] == [("clm", False),
                                                                       ("mdlm", True)]


def _oracle(answer, vocab, order):
    """A model that knows the answer: one-hot-ish logits for answer[i] at every position,
    more confident the earlier position i comes in `order`; records what it saw."""
    seen = []
    rank = np.empty(len(answer), int)
    rank[list(order)] = np.arange(len(answer))

    def logits(ids):
        seen.append(np.asarray(ids).copy())
        out = np.zeros((len(answer), vocab))
        out[np.arange(len(answer)), answer] = 10.0 - 0.1 * rank
        return out
    return logits, seen


def test_the_sampler_writes_the_known_answer_most_confident_first():
    answer = np.array([5, 3, 8, 2, 7, 4, 6, 1])
    mask = 9
    order = [3, 0, 6, 1, 7, 2, 5, 4]  # the oracle's confidence, highest first
    logits, seen = _oracle(answer, 10, order)
    out = mdlm.unmask(logits, [mask] * 8, mask, steps=3, seed=0)
    np.testing.assert_array_equal(out, answer)
    assert len(seen) == 3 and mdlm.reveal_counts(8, 3) == [3, 3, 2]
    revealed_after_first = set(np.flatnonzero(seen[1] != mask))
    assert revealed_after_first == set(order[:3])  # the three most confident first
    assert set(np.flatnonzero(seen[2] != mask)) == set(order[:6])


def test_random_remasking_is_deterministic_under_a_seed():
    answer = np.arange(1, 13)
    runs = {}
    for seed in (0, 0, 1):
        logits, seen = _oracle(answer, 14, range(12))
        out = mdlm.unmask(logits, [13] * 12, 13, steps=4, seed=seed, remasking="random",
                          temperature=1.0)
        runs.setdefault(seed, []).append(([tuple(s) for s in seen], tuple(out)))
    assert runs[0][0] == runs[0][1]
    assert runs[0][0][0] != runs[1][0][0]  # another seed reveals in another order


@pytest.mark.slow
def test_generate_writes_a_canvas_deterministically(tmp_path):
    """The CLI on a trained run: --diffusion_steps=4 fills 8 masks after the prompt, the
    same words twice under one seed."""
    from cli_fork import run_module
    from pretrainx.train import loop
    loop.train(_quickstart(), str(tmp_path / "run"), devices=jax.devices()[:1])
    args = [f"--workdir={tmp_path / 'run'}", "--prompt=It is a truth", "--diffusion_steps=4",
            "--canvas=8", "--temperature=1.0", "--seed=3"]
    outs = [run_module("pretrainx.generate", args, cwd=tmp_path) for _ in range(2)]
    assert all(o.returncode == 0 for o in outs), outs[0].stderr[-2000:]
    assert outs[0].stdout == outs[1].stdout and outs[0].stdout.startswith("It is a truth")


def test_bad_input_is_refused_in_one_line():
    with pytest.raises(UserError, match="--diffusion_steps=9 is more than the 8 masked tokens"):
        mdlm.reveal_counts(8, 9)
    with pytest.raises(UserError, match="--remasking='best'"):
        mdlm.unmask(lambda ids: np.zeros((2, 3)), [2, 2], 2, 1, 0, remasking="best")
    with pytest.raises(UserError, match="max_predictions_per_seq=16 is less than seq_len=32"):
        objectives.validate(_quickstart(**{"data.max_predictions_per_seq": 16}))


@pytest.mark.slow
def test_neobert_trains_with_mdlm_too(tmp_path):
    """NeoBERT's network under the same rows and loss (neobert_mdlm)."""
    from pretrainx.train import loop
    cfg = override(load_config("neobert.py", "quickstart"), {
        "objective": "neobert_mdlm", "total_steps": 4, "global_batch_size": 8, "seq_len": 32,
        "log_every": 1, "eval_every": 4, "eval_steps": 1, "checkpoint_every": 4,
        "model.num_layers": 1, "model.hidden_size": 32, "model.num_heads": 2,
        "model.mlp_dim": 64, "data.max_predictions_per_seq": 32, "phase2.fraction": 0.0})
    loop.train(objectives.validate(cfg), str(tmp_path / "neo"), devices=jax.devices()[:1])
    evals = read_metrics(tmp_path / "neo", split="eval")
    assert np.isfinite(evals[-1]["bound_perplexity"])
