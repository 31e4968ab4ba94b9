"""CLM then MLM in one run (configs/biphasic.py): a phase switches the objective among
the family's objectives over the same parameters, with the attention each needs; the
boundary record and the metrics show it; a run stopped at the switch or a step before it
resumes to the uninterrupted run's losses bit for bit; the finished workdir reads as the
last phase's model; a switch to an objective of other parameters, of another family, or
without the attention it needs is refused in one line."""

import jax
import numpy as np
import pytest

from conftest import ALICE, REPO, load_config, override, read_metrics
from pretrainx import interop, objectives
from pretrainx.errors import UserError
from pretrainx.train import loop

HOLMES = str(REPO / "pretrainx" / "assets" / "text" / "pg1661_adventures_of_sherlock_holmes.txt")


def _biphasic(**overrides):
    """Ettin's pair 2 layers x 32: 4 causal-LM steps, then 4 of MLM."""
    c = load_config("biphasic.py")
    c = override(c, {"total_steps": 8, "global_batch_size": 8, "seq_len": 32, "log_every": 1,
                     "eval_every": 1000, "eval_steps": 1, "checkpoint_every": 1000,
                     "keep_checkpoints": 5, "model.num_layers": 2, "model.hidden_size": 32,
                     "model.num_heads": 2, "model.mlp_dim": 64, "model.local_attention": 8,
                     "model.max_position_embeddings": 64, "data.max_predictions_per_seq": 12,
                     "optimizer.warmup_steps": 1, "optimizer.decay_steps": 2,
                     "data.train_files": HOLMES, "data.eval_files": ALICE, **overrides})
    c.phases.clm.steps = 4
    return c


@pytest.mark.slow
def test_clm_then_mlm_switches_objective_and_resumes_bit_for_bit(tmp_path):
    cfg = _biphasic()
    one = jax.devices()[:1]
    loop.train(cfg, str(tmp_path / "straight"), devices=one)
    bounds = read_metrics(tmp_path / "straight", split="phase")
    assert [(b["step"], b["phase"]) for b in bounds] == [(4, "mlm")]
    assert bounds[0]["sets"] == {"objective": "modernbert", "model.causal": False,
                                 "model.classifier_pooling": "cls"}
    evals = read_metrics(tmp_path / "straight", split="eval")
    assert [(e["step"], e["phase"]) for e in evals] == [(4, "clm"), (8, "mlm")]
    # next-token perplexity at the end of the causal phase, MLM accuracy at the end
    assert "perplexity" in evals[0] and "perplexity" not in evals[1]
    losses = [r["loss"] for r in read_metrics(tmp_path / "straight")]
    assert len(losses) == 8 and all(np.isfinite(losses))
    resumed = str(tmp_path / "resumed")
    loop.train(cfg, resumed, stop_at=3, devices=one)  # a step before the switch
    loop.train(cfg, resumed, stop_at=4, devices=one)  # at it: saved with MLM's data
    loop.train(cfg, resumed, devices=one)
    assert [r["loss"] for r in read_metrics(resumed)] == losses  # bit for bit
    final = interop.load(str(tmp_path / "straight"))
    assert final.model.causal is False and final.head != "causal_lm"
    at_switch = interop.load(resumed + "/checkpoints/4")
    assert at_switch.model.causal is True


def test_a_switch_that_cannot_hold_is_refused_in_one_line():
    cfg = _biphasic()
    cfg.phases.mlm.model.causal = True
    with pytest.raises(UserError, match="phase mlm: objective modernbert trains with "
                                        "model.causal=False; set it in the phase too"):
        objectives.validate(cfg)
    cfg = _biphasic()
    cfg.phases.mlm.objective = "qwen3_clm"
    with pytest.raises(UserError, match="phase mlm: objective qwen3_clm trains qwen3; this "
                                        "run's model is modernbert"):
        objectives.validate(cfg)


def test_a_switch_to_an_objective_of_other_parameters_is_refused():
    """DeBERTa-v3's RTD trains a generator beside the encoder that its MLM trains: an
    MLM run cannot switch to it."""
    import ml_collections
    c = load_config("deberta_mlm.py")
    c.phase_order = "a,b"
    c.phases.a = ml_collections.ConfigDict({"steps": 2})
    c.phases.b = ml_collections.ConfigDict({"objective": "deberta_rtd"})
    with pytest.raises(UserError, match=r"phase b: objective deberta_rtd reads keys this run's "
                                        r"config lacks \(disc_weight, gen_weight, "
                                        r"model.generator_layers\)"):
        objectives.validate(c)
