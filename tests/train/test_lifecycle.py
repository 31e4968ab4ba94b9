"""The modern encoder's lifecycle in one run (pretrainx/phasing.py): named phases that
change length, batch, RoPE base, data mix, masking rate and the schedule's segment; a
run stopped a step before a boundary or at it resumes to the uninterrupted run's losses
bit for bit; `start_phase` continues from trained weights at a later phase; what a
phase may not change is refused in one line."""

import json
import os

import jax
import ml_collections
import numpy as np
import pytest

from cli_fork import run_script
from conftest import (ALICE, REPO, assert_packed_examples_see_only_themselves, load_config,
                      override, read_metrics, xla_flags)
from pretrainx import config as config_lib
from pretrainx import objectives, pretrain
from pretrainx.errors import UserError
from pretrainx.train import loop, phases as phases_lib

BOOKS = REPO / "pretrainx" / "assets" / "text"
HOLMES = str(BOOKS / "pg1661_adventures_of_sherlock_holmes.txt")
PRIDE = str(BOOKS / "pg1342_pride_and_prejudice.txt")


def _phase(**keys):
    """A phase's keys, dotted ("model.global_rope_theta") as a nested ConfigDict."""
    nested = {}
    for dotted, value in keys.items():
        *groups, last = dotted.split("__")
        node = nested
        for g in groups:
            node = node.setdefault(g, {})
        node[last] = value
    return ml_collections.ConfigDict(nested)


def _lifecycle(**overrides):
    """ModernBERT 2 layers x 32: 3 steps at 32 tokens (global RoPE base 10,000, Holmes,
    30% masking, a constant rate after a 1-step warmup), 3 steps at 64 tokens with half
    the batch (base 160,000, Holmes and Pride and Prejudice mixed, a lower constant
    rate), 2 steps of 1 - sqrt decay at 15% masking."""
    c = load_config("modernbert_quickstart.py")
    c = override(c, {"total_steps": 8, "global_batch_size": 8, "seq_len": 32, "log_every": 1,
                     "eval_every": 1000, "eval_steps": 1, "checkpoint_every": 1000,
                     "keep_checkpoints": 5,
                     "model.num_layers": 2, "model.hidden_size": 32, "model.num_heads": 2,
                     "model.mlp_dim": 64, "model.local_attention": 8,
                     "model.max_position_embeddings": 64, "data.max_predictions_per_seq": 12,
                     "optimizer.warmup_steps": 1, "optimizer.decay_steps": 2,
                     "data.train_files": HOLMES, "data.eval_files": ALICE, **overrides})
    c.phase_order = "pretrain,extension,decay"
    c.phases.pretrain = _phase(steps=3, model__global_rope_theta=10_000.0,
                               optimizer__schedule="constant")
    c.phases.extension = _phase(steps=3, seq_len=64, global_batch_size=4,
                                model__global_rope_theta=160_000.0,
                                data__train_files=f"{HOLMES};{PRIDE}",
                                data__train_weights="0.5,0.5",
                                data__max_predictions_per_seq=24,
                                optimizer__learning_rate=1e-3, optimizer__warmup_steps=0)
    c.phases.decay = _phase(data__mask_prob=0.15, optimizer__schedule="warmup_stable_decay",
                            optimizer__decay_steps=2)
    return c


def _losses(workdir):
    return [r["loss"] for r in read_metrics(workdir)]


@pytest.mark.slow
def test_three_phases_resume_bit_for_bit_a_step_before_and_at_a_boundary(tmp_path):
    cfg = _lifecycle()
    one = jax.devices()[:1]
    loop.train(cfg, str(tmp_path / "straight"), devices=one)
    train = read_metrics(tmp_path / "straight")
    assert [(r["seq_len"], r["global_batch_size"]) for r in train] == \
        [(32, 8)] * 3 + [(64, 4)] * 5
    rates = [r["learning_rate"] for r in train]  # each step's, logged every step
    np.testing.assert_allclose(rates[1:3], [2e-3, 2e-3])  # constant after the warmup step
    np.testing.assert_allclose(rates[3:6], [1e-3] * 3)  # the extension's lower rate
    np.testing.assert_allclose(rates[6:], [1e-3, 1e-3 * (1 - np.sqrt(0.5))], rtol=1e-6)
    bounds = read_metrics(tmp_path / "straight", split="phase")
    assert [(b["step"], b["phase"], b["seq_len"]) for b in bounds] == [
        (3, "extension", 64), (6, "decay", 64)]
    assert bounds[0]["sets"]["model.global_rope_theta"] == 160_000.0
    assert bounds[1]["sets"] == {"data.mask_prob": 0.15, "optimizer.schedule":
                                 "warmup_stable_decay", "optimizer.decay_steps": 2}

    evals = read_metrics(tmp_path / "straight", split="eval")  # each phase's model at its end
    assert [(e["step"], e["phase"]) for e in evals] == [
        (3, "pretrain"), (6, "extension"), (8, "decay")]

    resumed = str(tmp_path / "resumed")
    loop.train(cfg, resumed, stop_at=2, devices=one)  # a step before the boundary
    loop.train(cfg, resumed, stop_at=3, devices=one)  # at it: saved with phase 2's data
    with open(os.path.join(resumed, "checkpoints", "3", "data", "metadata")) as f:
        assert json.load(f)["phase"] == "extension"
    loop.train(cfg, resumed, devices=one)
    assert _losses(tmp_path / "straight") == _losses(resumed)  # bit for bit
    straight_eval = read_metrics(tmp_path / "straight", split="eval")[-1]
    assert read_metrics(resumed, split="eval")[-1]["loss"] == straight_eval["loss"]

    # benchmarks/lifecycle.py on this run: each phase's end checkpoint (saved at the
    # boundary) as its own phase and the later ones, and as them with its own RoPE base
    bench = run_script(REPO / "benchmarks" / "lifecycle.py", [f"--workdir={tmp_path}/straight"],
                       cwd=REPO, timeout=600, env=dict(os.environ, XLA_FLAGS=xla_flags()))
    assert bench.returncode == 0, bench.stderr[-3000:]
    rows = json.loads(bench.stdout.strip().splitlines()[-1])["evaluations"]
    seen = [(r["checkpoint"], r["evaluated_as"], r["model"] != "as trained there")
            for r in rows]
    assert seen == [(3, "pretrain", False), (3, "extension", False), (3, "extension", True),
                    (3, "decay", False), (3, "decay", True), (6, "extension", False),
                    (6, "decay", False), (8, "decay", False)]
    own = {(r["checkpoint"], r["evaluated_as"]): r["loss"] for r in rows if
           r["model"] == "as trained there"}
    # phases of one length evaluate the same masked rows: one model, one number
    assert own[3, "extension"] == own[3, "decay"] and own[6, "extension"] == own[6, "decay"]

    # a later phase from those weights: fresh optimizer, the decay segment's schedule
    later = _lifecycle(init_from=str(tmp_path / "straight"), start_phase="decay")
    out = pretrain.train(later, str(tmp_path / "later"), devices=one)
    steps = [(r["step"], r["learning_rate"]) for r in read_metrics(tmp_path / "later")]
    assert [s for s, _ in steps] == [7, 8] and out["train"]["step"] == 8
    np.testing.assert_allclose([lr for _, lr in steps], rates[6:], rtol=1e-6)


def test_describe_tables_the_phases():
    cfg = _lifecycle()
    rows = phases_lib.describe(cfg, config_lib.phases(cfg),
                               lambda c: objectives.build(c, tokenizer=None))
    assert [(r["name"], r["steps"], r["tokens"], r.get("mask_prob")) for r in rows] == [
        ("pretrain", [0, 3], 3 * 8 * 32, 0.3), ("extension", [3, 6], 3 * 4 * 64, 0.3),
        ("decay", [6, 8], 2 * 4 * 64, 0.15)]
    assert rows[1]["mix"]["train_weights"] == "0.5,0.5"
    assert "constant from step 3 over 3 steps, peak 0.001" in rows[1]["learning_rate"]
    # the global layers attend over the whole row: longer rows cost more a token
    assert rows[1]["flops_per_token"] > rows[0]["flops_per_token"]
    text = phases_lib.table(rows)
    assert text.splitlines()[0].split()[:3] == ["phase", "steps", "tokens"]
    assert "model.global_rope_theta=160000.0" in text


@pytest.mark.parametrize("change,words", [
    ({"phases.extension.model.hidden_size": 64}, "changes the parameters' shapes"),
    ({"phases.extension.optimizer.b2": 0.9}, "cannot change between phases"),
    ({"phases.extension.data.tokenizer": "x.model"}, "cannot change between phases"),
    ({"phases.extension.model.rope_thetaa": 1.0}, "is not a key of this config"),
    ({"phases.decay.optimizer.decay_steps": 5}, "decay_steps=5 must be in (0, 2]"),
    ({"phases.pretrain.steps": 9}, "must fill the run in order"),
    ({"phase_order": "pretrain,decay"}, "phases.extension is not in phase_order"),
    ({"start_phase": "decay"}, "set init_from"),
    ({"start_phase": "cooldown", "init_from": "/x"}, "not one of phase_order's phases"),
    ({"phases.decay.data.mask_prob": 1.5}, "phase decay: data.mask_prob=1.5"),
])
def test_what_a_phase_may_not_do_is_one_line(change, words, tmp_path):
    cfg = _lifecycle()
    with cfg.unlocked():
        for key, value in change.items():
            node, *path = key.split(".")
            target = cfg[node] if path else cfg
            for p in path[:-1]:
                target = target[p]
            if path:
                target[path[-1]] = value
            else:
                cfg[node] = value
    with pytest.raises(UserError) as e:
        objectives.validate(cfg)
        loop.train(cfg, str(tmp_path / "w"), devices=jax.devices()[:1], stop_at=0)
    assert words in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert not (tmp_path / "w" / "checkpoints").exists()


def test_bert_phase2_form_is_unchanged():
    """BERT's phase2 still gives two phases of the run's own config."""
    c = load_config("bert_base.py")
    first, second = config_lib.phases(c)
    assert (first.end, second.seq_len, second.name, second.cfg) == (900_000, 512, "", c)


@pytest.mark.slow
def test_packed_rows_stay_isolated_at_8192_tokens():
    """The quickstart's ModernBERT shape (3 layers x 128, a 32-token window) with three
    long Alice passages packed in one row of 8,192: each gets its logits alone."""
    from pretrainx.data.tokenizers import load_tokenizer
    from pretrainx.families.modernbert import model as modernbert
    cfg = load_config("modernbert_quickstart.py").model
    cfg.max_position_embeddings = 8192
    tokenizer = load_tokenizer(str(REPO / "pretrainx" / "assets" / "spm_4k.model"),
                               lower_case=True)
    ids = tokenizer.encode(open(ALICE, encoding="utf-8").read())
    examples, at = [], 2000
    for n in (3500, 2900, 1700):  # 8,100 tokens: passages far longer than any window
        examples.append(np.asarray([tokenizer.cls_id] + ids[at:at + n - 2]
                                   + [tokenizer.sep_id], np.int32))
        at += n
    model = modernbert.ModernBertForMaskedLM(cfg)
    init = jax.jit(model.init)
    n = assert_packed_examples_see_only_themselves(
        model, lambda batch: init(jax.random.key(0), batch)["params"], examples, 8192)
    assert n == 8100
