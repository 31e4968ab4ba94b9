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


def _paraphrase_pairs(shared_data, path, limit):
    """MRPC's paraphrases (quality 1) as instruction pairs: the first sentence the prompt,
    the second the response (real sentences; the task is only a stand-in)."""
    import csv
    import json
    with open(shared_data / "glue" / "MRPC" / "train.tsv", encoding="utf-8-sig") as f:
        rows = [r for r in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)][1:]
    with open(path, "w", encoding="utf-8") as f:
        for r in [r for r in rows if r[0] == "1"][:limit]:
            f.write(json.dumps({"prompt": r[3], "response": r[4]}) + "\n")
    return str(path)


def test_response_only_masks_the_response_and_never_the_prompt(shared_data, tmp_path):
    pairs = _paraphrase_pairs(shared_data, tmp_path / "pairs.jsonl", 200)
    cfg = _quickstart(**{"data.response_only": True, "data.train_files": pairs,
                         "data.eval_files": pairs, "seq_len": 64,
                         "data.max_predictions_per_seq": 64,
                         "model.max_position_embeddings": 64})
    tok, diffusion = objectives.for_run(cfg)
    phase = types.SimpleNamespace(seq_len=64, global_batch_size=8, index=0, max_predictions=64)
    examples = diffusion.examples(pairs, phase, True)
    assert len(examples) == 200
    fn = diffusion.transform(phase, True)
    masked_total = response_total = 0.0
    for i, example in enumerate(examples):
        row = fn(example, np.random.default_rng(i), i)
        start = int(example["response_start"])
        ids = example["input_ids"]
        assert ids[0] == tok.cls_id and ids[start - 1] == tok.sep_id and ids[-1] == tok.sep_id
        # the prompt and the separators are as they were; masked tokens are in the response
        np.testing.assert_array_equal(row["input_ids"][:start], ids[:start])
        chosen = row["masked_lm_positions"][row["masked_lm_weights"] > 0]
        assert (chosen >= start).all() and (chosen < ids.size - 1).all()
        response = ids[start:-1]  # the response's tokens, but special ones ([UNK])
        assert row["mdlm_tokens"] == (~np.isin(response, tok.special_ids())).sum()
        masked_total += chosen.size
        response_total += row["mask_rate"] * row["mdlm_tokens"]
    assert abs(masked_total / response_total - 1.0) < 0.05


def test_response_only_bad_input_is_one_line(tmp_path):
    import json
    cfg = _quickstart()
    tok, _ = objectives.for_run(cfg)
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps({"prompt": "one two " * 40, "response": "three " * 40}) + "\n")
    (long,) = mdlm.instruction_examples(str(path), cfg.data, tok, 32)
    # the prompt keeps its end and half the room; the response the rest
    assert long["input_ids"].size == 32 and long["response_start"] == 2 + (32 - 3) // 2
    assert tok.decode(long["input_ids"][long["response_start"]:-1]).split()[0] == "three"
    path.write_text(json.dumps({"question": "a", "response": "b"}) + "\n")
    with pytest.raises(UserError, match="long.jsonl line 1: not a JSON object with prompt"):
        mdlm.instruction_examples(str(path), cfg.data, tok, 32)
    with pytest.raises(UserError, match="reads JSONL files of pairs: .*nowhere.jsonl"):
        mdlm.instruction_examples(str(tmp_path / "nowhere.jsonl"), cfg.data, tok, 32)


@pytest.mark.slow
def test_response_only_tuning_runs_and_its_bound_falls(shared_data, tmp_path):
    """A few steps of instruction tuning on paraphrase pairs: the held-out bound of the
    responses falls, and generate writes a response after a prompt."""
    from pretrainx.train import loop
    train = _paraphrase_pairs(shared_data, tmp_path / "train.jsonl", 400)
    cfg = _quickstart(**{"data.response_only": True, "data.train_files": train,
                         "data.eval_files": train, "seq_len": 64,
                         "data.max_predictions_per_seq": 64, "total_steps": 30,
                         "eval_every": 15, "model.max_position_embeddings": 64,
                         "optimizer.learning_rate": 3e-3})
    loop.train(objectives.validate(cfg), str(tmp_path / "run"), devices=jax.devices()[:1])
    evals = read_metrics(tmp_path / "run", split="eval")
    assert evals[-1]["loss"] < evals[0]["loss"]
    from cli_fork import run_module  # the response written after the prompt's [SEP]
    out = run_module("pretrainx.generate", [f"--workdir={tmp_path / 'run'}",
                                            "--prompt=The company said it would",
                                            "--diffusion_steps=4", "--canvas=8"], cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("The company said it would ")
