"""The train loop end to end on real text: sharding invariance, resume, learning."""

import os
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from conftest import REPO, read_metrics, tiny_bert_config, xla_flags
from pretrainx.train import loop


def _losses(workdir):
    return [r["loss"] for r in read_metrics(workdir)]


def _eval(workdir):
    """The final eval record's numbers (the loop evaluates at the last step)."""
    records = read_metrics(workdir, split="eval")
    assert records, f"no eval record in {workdir}"
    return {k: v for k, v in records[-1].items() if isinstance(v, float) and "time" not in k
            and "per_sec" not in k}


@pytest.mark.slow
@pytest.mark.parametrize("scan", [False, True], ids=["unrolled", "scanned"])
def test_sharded_equals_unsharded(tmp_path, scan):
    """The same 5 steps on 1 device and on a (data=2, fsdp=2, tensor=2) mesh."""
    assert jax.device_count() == 8
    one = tiny_bert_config(total_steps=5, **{"mesh.data": 1, "model.scan_layers": scan})
    loop.train(one, str(tmp_path / "one"), devices=jax.devices()[:1])
    mesh = tiny_bert_config(total_steps=5, **{"mesh.data": 2, "mesh.fsdp": 2, "mesh.tensor": 2,
                                              "model.scan_layers": scan})
    loop.train(mesh, str(tmp_path / "mesh"))
    a, b = _losses(tmp_path / "one"), _losses(tmp_path / "mesh")
    assert len(a) == len(b) == 5
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
    # Not vacuous: parameters moved, so later losses depend on the sharded updates.
    assert a[0] != a[-1]
    # Evaluation too: the same numbers from the sharded eval step.
    eval_one, eval_mesh = _eval(tmp_path / "one"), _eval(tmp_path / "mesh")
    assert eval_one.keys() == eval_mesh.keys() and "mlm_accuracy" in eval_one, eval_one
    for k in eval_one:
        np.testing.assert_allclose(eval_one[k], eval_mesh[k], rtol=0, atol=1e-5, err_msg=k)


@pytest.mark.slow
def test_resume_continues_exactly(tmp_path):
    cfg = tiny_bert_config(total_steps=6, checkpoint_every=3)
    loop.train(cfg, str(tmp_path / "straight"))
    loop.train(cfg, str(tmp_path / "resumed"), stop_at=3)
    assert len(_losses(tmp_path / "resumed")) == 3
    loop.train(cfg, str(tmp_path / "resumed"))
    straight, resumed = _losses(tmp_path / "straight"), _losses(tmp_path / "resumed")
    assert len(resumed) == 6
    assert straight == resumed  # bitwise: params, optimizer, RNG and data position restored
    assert _eval(tmp_path / "straight") == _eval(tmp_path / "resumed")


@pytest.mark.slow
def test_gradient_accumulation_matches_full_batch(tmp_path):
    """Without dropout, 2 micro-batches give the update of one full batch."""
    no_dropout = {"model.dropout_rate": 0.0, "model.attention_dropout_rate": 0.0}
    full = tiny_bert_config(total_steps=3, global_batch_size=16, **no_dropout)
    loop.train(full, str(tmp_path / "full"), devices=jax.devices()[:1])
    acc = tiny_bert_config(total_steps=3, global_batch_size=16, micro_batches=2, **no_dropout)
    loop.train(acc, str(tmp_path / "acc"), devices=jax.devices()[:1])
    np.testing.assert_allclose(_losses(tmp_path / "full"), _losses(tmp_path / "acc"),
                               rtol=0, atol=1e-5)


@pytest.mark.slow
def test_loss_falls_on_real_text(tmp_path):
    cfg = tiny_bert_config(total_steps=60, global_batch_size=16, checkpoint_every=60,
                           eval_every=60, log_every=10, **{"optimizer.learning_rate": 2e-3,
                                                            "optimizer.warmup_steps": 10})
    result = loop.train(cfg, str(tmp_path), devices=jax.devices()[:1])
    losses = _losses(tmp_path)
    assert losses[-1] < losses[0] - 1.0, losses
    # Held-out book: better than the untrained model's log(vocab) = 8.3 by a margin.
    assert result["eval"]["mlm_loss"] < 7.0
    assert result["eval"]["mlm_accuracy"] > 0.05


def test_metrics_records_carry_the_contract(tmp_path, monkeypatch):
    cfg = tiny_bert_config(total_steps=2, eval_every=2, checkpoint_every=2)
    loop.train(cfg, str(tmp_path), devices=jax.devices()[:1])
    train = read_metrics(tmp_path)
    for key in ("step", "loss", "learning_rate", "mlm_loss", "mlm_accuracy", "nsp_loss",
                "nsp_accuracy", "grad_norm", "tokens_per_sec", "mfu"):
        assert key in train[-1], key
    assert np.isfinite(train[-1]["mfu"]) and train[-1]["tokens_per_sec"] > 0
    evals = read_metrics(tmp_path, "eval")
    assert evals and evals[-1]["split"] == "eval" and "mlm_accuracy" in evals[-1]
    assert (tmp_path / "checkpoints" / "2").is_dir()
    # input_wait: the share of an interval the loop waited on data, so the seconds
    # waited are input_wait x the interval's (batch x length / tokens_per_sec). Grain's
    # prefetch fills while the first step compiles: this run hardly waits; one whose
    # pipeline takes 0.3 s a batch waits those 0.3 s in its one-step interval.
    def waited(record):
        return record["input_wait"] * 8 * 64 / record["tokens_per_sec"]

    assert (cfg.global_batch_size, cfg.seq_len) == (8, 64)
    assert 0 <= waited(train[-1]) < 0.1, train
    from pretrainx.train import phases as phases_lib
    real = phases_lib.Phases.train_iterator

    class Starved:
        def __init__(self, inner):
            self.inner = inner

        def __next__(self):
            time.sleep(0.3)
            return next(self.inner)

        def __getattr__(self, name):  # get_state, set_state
            return getattr(self.inner, name)

    monkeypatch.setattr(phases_lib.Phases, "train_iterator",
                        lambda self, *a, **k: Starved(real(self, *a, **k)))
    loop.train(cfg, str(tmp_path / "starved"), devices=jax.devices()[:1])
    starved = read_metrics(tmp_path / "starved")[-1]
    assert 0.29 < waited(starved) < 0.5 and 0 < starved["input_wait"] <= 1, starved


def test_tensorboard_scalars_are_written_without_importing_torch(tmp_path):
    """tensorboardX imports PyTorch when it is installed; the writer keeps it out (1.8 s of
    every run's start-up) and still writes each record's scalars under its split."""
    pytest.importorskip("tensorboardX")
    code = ("import sys; from pretrainx.train.metrics import MetricsWriter; "
            f"w = MetricsWriter({str(tmp_path)!r}, 2, enabled=True); "
            "w.write({'step': 1, 'loss': 2.5}); w.write({'step': 2, 'split': 'eval', "
            "'mlm_accuracy': 0.5}); w.close(); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=120, env=dict(os.environ, XLA_FLAGS=xla_flags(1)))
    assert out.returncode == 0 and out.stdout.split()[-1] == "False", out.stderr[-2000:]
    events = (tmp_path / "tensorboard").glob("events.*")
    data = b"".join(p.read_bytes() for p in events)
    assert b"train/loss" in data and b"eval/mlm_accuracy" in data


@pytest.mark.slow
def test_two_phase_recipe_switches_and_resumes_at_the_boundary(tmp_path):
    """90/10 becomes 50/50 here: steps 1-2 at length 64, steps 3-4 at 128 with a
    smaller batch, in one run; a run stopped at the switch resumes into phase 2."""
    cfg = tiny_bert_config(total_steps=4, checkpoint_every=2, global_batch_size=16, **{
        "phase2.fraction": 0.5, "phase2.seq_len": 128, "phase2.global_batch_size": 8,
        "phase2.max_predictions_per_seq": 20})
    one = jax.devices()[:1]
    loop.train(cfg, str(tmp_path / "straight"), devices=one)
    records = read_metrics(tmp_path / "straight")
    assert [(r["seq_len"], r["global_batch_size"]) for r in records] == [(64, 16)] * 2 + [(128, 8)] * 2
    loop.train(cfg, str(tmp_path / "resumed"), stop_at=2, devices=one)
    loop.train(cfg, str(tmp_path / "resumed"), devices=one)
    assert _losses(tmp_path / "straight") == _losses(tmp_path / "resumed")


@pytest.mark.slow
def test_bfloat16_compute_trains_and_keeps_float32_parameters_and_moments(tmp_path):
    """Mixed precision as the recipes mean it: matmuls in bfloat16, while every
    parameter and every optimizer moment (the checkpointed state, leaf by leaf)
    stays float32, so small updates are not rounded away."""
    import orbax.checkpoint as ocp
    cfg = tiny_bert_config(total_steps=4, checkpoint_every=4, **{
        "model.dtype": "bfloat16", "optimizer.learning_rate": 2e-3})
    loop.train(cfg, str(tmp_path), devices=jax.devices()[:1])
    losses = _losses(tmp_path)
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
    state = ocp.StandardCheckpointer().restore(tmp_path / "checkpoints" / "4" / "state")
    floats = [(jax.tree_util.keystr(path), leaf.dtype) for path, leaf in
              jax.tree_util.tree_leaves_with_path({"params": state["params"],
                                                   "opt_state": state["opt_state"]})
              if np.issubdtype(leaf.dtype, np.floating)]
    assert len(floats) > 3 * len(jax.tree_util.tree_leaves(state["params"])) - 1  # + mu, nu
    assert all(dtype == np.float32 for _, dtype in floats), [f for f in floats
                                                              if f[1] != np.float32]


@pytest.mark.slow
def test_profile_steps_write_a_trace_of_the_train_step(tmp_path):
    # In a fresh process: the profiler must not meet the libtpu that other tests load.
    result = subprocess.run(
        [sys.executable, "-m", "pretrainx.main", "--config=configs/quickstart.py",
         f"--workdir={tmp_path}", "--config.total_steps=4", "--config.profile_steps=2",
         "--config.profile_start_step=1", "--config.global_batch_size=8",
         "--config.seq_len=32", "--config.model.num_layers=1", "--config.data.eval_files=",
         "--config.data.dupe_factor=1"],
        cwd=REPO, env=dict(os.environ, XLA_FLAGS=xla_flags(1)),
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    traces = list((tmp_path / "profile" / "plugins" / "profile").glob("*/*.xplane.pb"))
    assert len(traces) == 1  # where TensorBoard's profile tab looks
    assert b"train_step" in traces[0].read_bytes()
