"""The batch-size ramp on the step clock (train/ramp.py): ModernBERT's batch warmup as its
recipe states it, updates that take the micro-batches the ramp says, the learning rate
counted in micro-batch steps, and a resume in the middle of an accumulation."""

import jax
import numpy as np
import pytest

from conftest import ALICE, load_config, override, read_metrics
from pretrainx.errors import UserError
from pretrainx import objectives
from pretrainx.interop import workdir as workdir_lib
from pretrainx.train import loop, ramp, schedules


def _updates(opt_cfg, steps: int, total_steps: int) -> list:
    """The size (in micro-batches) of each update over `steps` steps, as the step clock
    sets `every` before each step and the accumulating optimizer emits at count >= every."""
    sizes, count = [], 0
    for step in range(steps):
        every = ramp.accumulation_at(step / total_steps, opt_cfg)
        count += 1
        if count >= every:
            sizes.append(count)
            count = 0
    return sizes


@pytest.mark.parametrize("size,first,final,ramp_tokens", [
    ("base", 768, 4608, 50e9), ("large", 448, 4928, 10e9)])
def test_modernbert_batch_warmup_is_the_papers(size, first, final, ramp_tokens):
    """768 -> 4,608 rows over 50B tokens (base), 448 -> 4,928 over 10B (large): updates
    grow one micro-batch at a time, each size takes the same number of updates (as their
    BatchSizeWarmupScheduler), and the full batch starts where the ramp's tokens end."""
    cfg = load_config("modernbert.py", size)
    o, tokens = cfg.optimizer, cfg.global_batch_size * cfg.seq_len
    assert cfg.global_batch_size == first and o.accumulate_to * first == final
    assert o.batch_ramp_shape == "equal_updates"
    ramp_steps = ramp_tokens / tokens
    sizes = _updates(o, round(ramp_steps * 1.05), cfg.total_steps)
    assert sizes == sorted(sizes) and sizes[0] == 1 and sizes[-1] == o.accumulate_to
    per_size = np.bincount(sizes)[1:o.accumulate_to]
    assert per_size.max() - per_size.min() <= 1, per_size
    full_from = sum(sizes[:sizes.index(o.accumulate_to)])  # steps before the first full update
    assert abs(full_from - ramp_steps) <= o.accumulate_to, (full_from, ramp_steps)
    # the rate's warmup and decay are counted in the same steps: tokens
    assert abs(o.warmup_steps * tokens / (3e9 if size == "base" else 2e9) - 1) < 1e-3
    assert abs(o.decay_steps * tokens / 50e9 - 1) < 1e-3


def test_accumulation_without_a_ramp():
    """accumulate_to without a ramp: every update takes accumulate_to steps from the
    start; no accumulate_to, no clock (the crammed BERT's linear ramp: test_crammed)."""
    flat = override(load_config("crammed_bert.py"), {"optimizer.batch_ramp": 0.0}).optimizer
    assert ramp.accumulating(flat) and ramp.accumulation_at(0.0, flat) == 64
    assert not ramp.accumulating(load_config("quickstart.py").optimizer)


def _run(**overrides):
    c = load_config("modernbert_quickstart.py")
    return override(c, {"total_steps": 8, "log_every": 1, "eval_every": 1000,
                        "checkpoint_every": 1, "keep_checkpoints": 20,
                        "global_batch_size": 4, "seq_len": 64,
                        "data.max_predictions_per_seq": 20, "model.local_attention": 16,
                        "model.max_position_embeddings": 64, "optimizer.warmup_steps": 4,
                        "optimizer.decay_steps": 2, "optimizer.accumulate_to": 3,
                        "optimizer.batch_ramp": 0.5, "optimizer.batch_ramp_shape": "linear",
                        "data.train_files": ALICE, "data.eval_files": "", **overrides})


def _params(workdir, step):
    return jax.tree_util.tree_leaves(workdir_lib.load_pretraining(str(workdir), step).params)


@pytest.mark.slow
def test_updates_follow_the_step_clock_and_resume_mid_accumulation(tmp_path):
    """8 steps, accumulate_to 3 reached at half the run (linear): updates of 1, 1, 3 and 3
    micro-batches, so parameters move after steps 1, 2, 5 and 8 and nowhere else; the
    rate logged at step k is the schedule at micro-batch step k - 1; stopped at step 3
    (two micro-batches summed) and resumed, the run gives the straight run's losses."""
    cfg = _run()
    straight = tmp_path / "straight"
    loop.train(cfg, str(straight), devices=jax.devices()[:1])
    assert _updates(cfg.optimizer, 8, 8) == [1, 1, 3, 3]
    moved = []
    for step in range(1, 9):
        before = _params(straight, step - 1) if step > 1 else None
        after = _params(straight, step)
        if before is not None:
            moved.append(any(not np.array_equal(a, b) for a, b in zip(after, before)))
    assert moved == [True, False, False, True, False, False, True]  # steps 2..8
    records = read_metrics(straight)
    schedule = schedules.learning_rate_schedule(cfg.optimizer, cfg.total_steps)
    np.testing.assert_allclose([r["learning_rate"] for r in records],
                               [float(schedule(k)) for k in range(8)], rtol=1e-6)
    resumed = tmp_path / "resumed"
    loop.train(cfg, str(resumed), devices=jax.devices()[:1], stop_at=3)
    loop.train(cfg, str(resumed), devices=jax.devices()[:1])
    np.testing.assert_array_equal([r["loss"] for r in read_metrics(resumed)][-5:],
                                  [r["loss"] for r in records][-5:])
    for a, b in zip(_params(resumed, 8), _params(straight, 8)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("key,value,words", [
    ("optimizer.accumulate_to", 0, "accumulate_to=0"),
    ("optimizer.batch_ramp", 1.0, "batch_ramp=1.0"),
    ("optimizer.batch_ramp_shape", "cubic", "batch_ramp_shape"),
    ("micro_batches", 2, "micro_batches > 1"),
])
def test_bad_ramp_is_one_line(key, value, words):
    cfg = override(_run(), {key: value})
    with pytest.raises(UserError, match=words) as caught:
        objectives.validate(cfg)
    assert "\n" not in str(caught.value)
