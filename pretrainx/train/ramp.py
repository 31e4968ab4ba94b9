"""A batch-size ramp by accumulation (optimizer.accumulate_to, optimizer.batch_ramp): one
train step is one micro-batch of global_batch_size rows, and an update averages the
gradients of `every` steps, which rises from 1 to accumulate_to over the first
batch_ramp of the run.

The run's progress is elapsed time over a wall-clock budget (train/budget.py sets it,
as the crammed BERT does), or without a budget the step over total_steps: micro-batch
steps, so tokens, as ModernBERT counts its warmup (768 -> 4,608 rows over 50B tokens).
On the step clock the learning-rate schedules also read the micro-batch step, so that
warmup and decay stay counted in tokens while updates take more of them.

Two shapes (optimizer.batch_ramp_shape):
- `linear` (the crammed BERT): micro-batches an update takes = ceil(accumulate_to x
  progress / batch_ramp);
- `equal_updates` (ModernBERT's BatchSizeWarmupScheduler): each batch size from 1 to
  accumulate_to - 1 micro-batches gets the same number of updates, so its share of the
  ramp's tokens is proportional to its size.
"""

import math


SHAPES = ("linear", "equal_updates")


def accumulating(opt_cfg) -> bool:
    """Whether updates accumulate whole steps (the optimizer is wrapped and a clock runs)."""
    return int(opt_cfg.accumulate_to) > 1 or bool(opt_cfg.batch_ramp)


def accumulation_at(progress: float, opt_cfg) -> int:
    """Micro-batches an update takes at `progress` (0..1) of the run."""
    full = int(opt_cfg.accumulate_to)
    ramp = float(opt_cfg.batch_ramp)
    if not ramp or progress >= ramp:
        return full
    fraction = progress / ramp
    if opt_cfg.batch_ramp_shape == "linear":
        return max(1, min(full, math.ceil(full * fraction)))
    # equal_updates: size k ends where sizes 1..k have used their share of the ramp
    total = full * (full - 1) / 2
    used = 0
    for size in range(1, full):
        used += size
        if fraction < used / total:
            return size
    return full


def clock_at(cfg, step: int, budget_progress: float | None = None) -> tuple:
    """(schedule step, micro-batches an update takes) for the step after `step`: the
    one function the train step's clock comes from (train/step.py's `clock`).

    With a wall-clock budget, its progress p: the schedules read p x total_steps and
    the ramp follows p. Without, the step itself: the schedules read the micro-batch
    step (so warmup and decay count tokens while updates take more of them) and the
    ramp follows step / total_steps. Every process computes the same values, and a
    resumed run continues them."""
    opt = cfg.optimizer
    progress = step / cfg.total_steps if budget_progress is None else budget_progress
    every = accumulation_at(progress, opt) if accumulating(opt) else 1
    schedule_step = step if budget_progress is None else int(budget_progress * cfg.total_steps)
    return schedule_step, every
