"""The crammed BERT: its one-cycle schedule, the batch ramp's accumulation, the wall-clock
budget that drives both (and ends, evaluates, saves and resumes a run), its model's
pieces, training on real text with mesh == single device, fine-tuning, bad input."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from conftest import ALICE, load_config, losses_on_one_and_a_mesh, override, read_metrics
from pretrainx import objectives
from pretrainx.errors import UserError
from pretrainx.families.crammed import model as crammed
from pretrainx.train import loop, optim, ramp, schedules


def test_one_cycle_is_their_triangle():
    """budget-triangle2: 25% of the peak at the start, the peak at 75% of the run, 0 at
    its end, linear in between."""
    o = load_config("crammed_quickstart.py").optimizer
    f = schedules.learning_rate_schedule(o, 1000)
    peak = o.learning_rate
    for step, share in ((0, 0.25), (375, 0.625), (750, 1.0), (875, 0.5), (1000, 0.0)):
        assert abs(float(f(step)) - share * peak) < 1e-9, step


def test_accumulating_updates_with_the_mean_of_every_k_gradients():
    """With every = 3, parameters move on every third step only, by the wrapped
    optimizer's update for the mean of the three gradients; `every` changes between
    steps as the host sets it."""
    params = {"w": jnp.ones((3, 2))}
    inner = optax.adam(0.1)
    tx = optim.accumulating(inner)
    state = optim.set_clock(tx.init(params), 0, every=3)
    ref_state = inner.init(params)
    grads = [{"w": jnp.full((3, 2), float(i + 1))} for i in range(6)]
    for i, g in enumerate(grads[:3]):
        updates, state = tx.update(g, state, params)
        if i < 2:
            assert float(jnp.abs(updates["w"]).max()) == 0.0
    mean = {"w": (grads[0]["w"] + grads[1]["w"] + grads[2]["w"]) / 3}
    expected, ref_state = inner.update(mean, ref_state, params)
    np.testing.assert_allclose(updates["w"], expected["w"], rtol=1e-6)
    state = optim.set_clock(state, 0, every=1)  # the ramp's first steps: one micro-batch
    updates, state = tx.update(grads[3], state, params)
    expected, _ = inner.update(grads[3], ref_state, params)
    np.testing.assert_allclose(updates["w"], expected["w"], rtol=1e-6)


def test_the_ramp_and_the_clock():
    """accumulate_to at 60% of the budget, one micro-batch at its start, linear between;
    set_clock moves every schedule counter."""
    o = load_config("crammed_bert.py").optimizer
    assert [ramp.accumulation_at(p, o) for p in (0.0, 0.3, 0.6, 0.9)] == [1, 32, 64, 64]
    tx = optim.make_optimizer(o, 900_000)
    state = optim.set_clock(tx.init({"w": jnp.ones(2)}), 12345, every=7)
    assert [int(c) for c in optim.schedule_steps(state)] == [12345]
    assert int(optim.clock(state, 0)) == 12345


def test_scaled_sinusoidal_positions():
    table = np.asarray(crammed.sinusoid(50, 8))
    pos, dim = 17, 4
    assert abs(table[pos, dim] - np.sin(pos / 10000 ** (dim / 8))) < 1e-6
    assert abs(table[pos, dim + 1] - np.cos(pos / 10000 ** (dim / 8))) < 1e-6


def _quick(**overrides):
    c = load_config("crammed_quickstart.py")
    return override(c, {"total_steps": 12, "log_every": 1, "eval_every": 12, "eval_steps": 2,
                        "checkpoint_every": 12, "global_batch_size": 8, "seq_len": 64,
                        "data.max_predictions_per_seq": 16, "optimizer.budget_hours": 0.0,
                        "optimizer.batch_ramp": 0.0, "optimizer.accumulate_to": 1,
                        "optimizer.learning_rate": 5e-3, "data.train_files": ALICE,
                        **overrides})


@pytest.mark.slow
def test_a_budget_ends_evaluates_saves_and_resumes(tmp_path):
    """A 5-second budget: the run stops at the first step past it (long before
    total_steps), logs an eval at 15% masking and saves a checkpoint there; the learning
    rate logged follows elapsed time (a quarter of the peak at first, at most the peak);
    updates take more micro-batches as the ramp rises. Run again with the same budget,
    it trains nothing; with a budget twice as long, it resumes at the recorded time and
    stops again."""
    workdir = str(tmp_path / "w")
    cfg = _quick(total_steps=100_000, log_every=2, eval_every=100_000,
                 checkpoint_every=100_000,
                 **{"optimizer.budget_hours": 5 / 3600, "optimizer.batch_ramp": 0.5,
                    "optimizer.accumulate_to": 4})
    # The budget counts compilation, as the paper's does, and on a slow sitting the
    # first step's compile alone took the 5 seconds (CI, 2026-12-02: "spent at step 1").
    # The same program compiled first, by a run whose budget ends at its first step,
    # is read back from JAX's persistent cache (on in the tests) by the run timed here.
    warm = override(cfg.copy_and_resolve_references(), {"optimizer.budget_hours": 1e-9})
    loop.train(warm, str(tmp_path / "warm"), devices=jax.devices()[:1])
    out = loop.train(cfg, workdir, devices=jax.devices()[:1])
    train = read_metrics(workdir)
    steps = train[-1]["step"]
    assert 2 <= steps < 100_000 and out["eval"]["step"] == steps
    lrs = [r["learning_rate"] for r in train]
    peak = cfg.optimizer.learning_rate
    assert lrs[0] >= 0.25 * peak - 1e-9 and max(lrs) <= peak + 1e-9
    record = json.loads((tmp_path / "w" / "budget.json").read_text())
    assert record[str(steps)] >= 5
    assert (tmp_path / "w" / "checkpoints" / str(steps)).exists()
    loop.train(cfg, workdir, devices=jax.devices()[:1])  # spent: it trained one step more
    assert read_metrics(workdir)[-1]["step"] == steps
    assert sorted(p.name for p in (tmp_path / "w" / "checkpoints").iterdir()) == [str(steps)]
    longer = override(cfg, {"optimizer.budget_hours": 10 / 3600})
    loop.train(longer, workdir, devices=jax.devices()[:1])
    again = read_metrics(workdir)
    assert again[-1]["step"] > steps
    record = json.loads((tmp_path / "w" / "budget.json").read_text())
    assert record[str(again[-1]["step"])] >= 10


@pytest.mark.slow
def test_loss_falls_sharded_equals_unsharded_and_glue_finetunes(shared_data, tmp_path):
    from pretrainx import interop
    from pretrainx.finetune import loop as finetune_loop
    from pretrainx.finetune.config import finetune_config
    one = str(tmp_path / "one")
    a, b = losses_on_one_and_a_mesh(_quick, tmp_path)
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
    assert np.mean(a[-3:]) < a[0] - 1.0, a
    assert (interop.load(one).family, interop.load(one).head) == ("crammed", "mlm")
    cfg = finetune_config()
    cfg.update_from_flattened_dict({
        "init_from": one, "task": "sst2", "data.glue_dir": str(shared_data / "glue"),
        "seq_len": 64, "global_batch_size": 16, "epochs": 1, "data.max_train_examples": 64,
        "data.max_eval_examples": 32})
    out = finetune_loop.train(cfg, str(tmp_path / "ft"), devices=jax.devices()[:1])
    assert 0 <= out["best"]["accuracy"] <= 1
    assert interop.load(str(tmp_path / "ft")).head == "classify"


@pytest.mark.parametrize("key,value,words", [
    ("optimizer.budget_hours", -1.0, "budget_hours=-1.0"),
    ("optimizer.accumulate_to", 0, "accumulate_to=0"),
    ("optimizer.batch_ramp", 1.5, "batch_ramp=1.5"),
    ("optimizer.cycle_falloff", 0.0, "cycle_falloff=0.0"),
    ("data.eval_mask_prob", 2.0, "eval_mask_prob"),
])
def test_bad_input_is_one_line(key, value, words):
    cfg = override(load_config("crammed_quickstart.py"), {key: value})
    with pytest.raises(UserError) as err:
        objectives.validate(cfg)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_a_ramp_without_a_budget_runs_on_the_step_clock():
    """Without a budget the ramp follows step / total_steps (train/ramp.py; ModernBERT's
    batch warmup), so it validates; its run is tested in test_ramp."""
    cfg = override(load_config("crammed_quickstart.py"), {"optimizer.budget_hours": 0.0})
    objectives.validate(cfg)
