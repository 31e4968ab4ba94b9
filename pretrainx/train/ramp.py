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

from pretrainx.train import optim

SHAPES = ("linear", "equal_updates")


def accumulating(opt_cfg) -> bool:
    """Whether updates accumulate whole steps (the optimizer is wrapped and a clock runs)."""
    return int(opt_cfg.get("accumulate_to", 1)) > 1 or bool(opt_cfg.get("batch_ramp", 0.0))


def accumulation_at(progress: float, opt_cfg) -> int:
    """Micro-batches an update takes at `progress` (0..1) of the run."""
    full = int(opt_cfg.get("accumulate_to", 1))
    ramp = float(opt_cfg.get("batch_ramp", 0.0))
    if not ramp or progress >= ramp:
        return full
    fraction = progress / ramp
    if opt_cfg.get("batch_ramp_shape", "linear") == "linear":
        return max(1, min(full, math.ceil(full * fraction)))
    # equal_updates: size k ends where sizes 1..k have used their share of the ramp
    total = full * (full - 1) / 2
    used = 0
    for size in range(1, full):
        used += size
        if fraction < used / total:
            return size
    return full


class StepRamp:
    """The hook (train/hooks.py's protocol) that, without a wall-clock budget, sets the
    schedules' clock to the micro-batch step and the accumulation from step /
    total_steps before each step; first in the list. The clock follows run.step alone,
    so every process computes the same values and a resumed run continues them."""

    def before_step(self, run):
        cfg = run.cfg
        every = accumulation_at(run.step / cfg.total_steps, cfg.optimizer)
        run.state = run.state.replace(
            opt_state=optim.set_clock(run.state.opt_state, run.step, every))

    def after_step(self, run, step_metrics):
        return []

    def close(self):
        pass
