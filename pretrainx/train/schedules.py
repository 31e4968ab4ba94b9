"""The learning-rate schedules (config key optimizer.schedule), each registered here
beside its code: a new schedule is one function and its `@schedule(...)` line.

Each maps the step (a float32 array) to the rate. With `warmup=True` the rate is the
linear warmup peak * step / warmup_steps while step < warmup_steps and the function's
value after; the others shape their own start. `needs`: the optimizer keys a schedule
reads besides the shared ones; the recipes that use it set them (the crammed BERT,
ModernBERT, NeoBERT, ULMFiT, word2vec), so that each value lives in one place."""

from typing import Callable, NamedTuple

import jax.numpy as jnp

from pretrainx.errors import UserError


class Schedule(NamedTuple):
    rate: Callable  # (opt_cfg, step, peak, warmup, total_steps) -> rate
    warmup: bool
    needs: tuple


SCHEDULES: dict = {}


def schedule(name: str, warmup: bool = True, needs: tuple = ()):
    def register(rate):
        SCHEDULES[name] = Schedule(rate, warmup, needs)
        return rate
    return register


@schedule("bert_linear")
def _bert_linear(o, step, peak, warmup, total):
    """google-research/bert's optimization.py to the letter: a linear decay from the peak
    to 0 at total_steps counted from step 0, overridden by the warmup while it lasts (so
    the decay is already at 1 - warmup/total when warmup ends)."""
    return peak * jnp.maximum(0.0, 1.0 - step / total)


@schedule("warmup_linear")
def _warmup_linear(o, step, peak, warmup, total):
    """A linear decay from the peak at the end of warmup to 0 at total_steps."""
    return peak * jnp.maximum(0.0, 1.0 - (step - warmup) / max(total - warmup, 1))


@schedule("constant")
def _constant(o, step, peak, warmup, total):
    return jnp.asarray(peak, jnp.float32)


@schedule("rsqrt", warmup=False)
def _rsqrt(o, step, peak, warmup, total):
    """T5's: learning_rate * sqrt(warmup) / sqrt(max(step, warmup)), which with
    learning_rate 0.01 and warmup 10^4 is the paper's 1/sqrt(max(step, 10^4))."""
    return peak * jnp.sqrt(max(warmup, 1) / jnp.maximum(step, max(warmup, 1)))


@schedule("cosine")
def _cosine(o, step, peak, warmup, total):
    """GPT-1/2's: half a cosine from the peak to 0 at total_steps."""
    progress = jnp.clip((step - warmup) / max(total - warmup, 1), 0.0, 1.0)
    return peak * 0.5 * (1.0 + jnp.cos(jnp.pi * progress))


@schedule("cosine_floor", needs=("final_lr_fraction",))
def _cosine_floor(o, step, peak, warmup, total):
    """NeoBERT's: the cosine, ending at final_lr_fraction of the peak instead of 0."""
    floor = float(o.final_lr_fraction)
    progress = jnp.clip((step - warmup) / max(total - warmup, 1), 0.0, 1.0)
    return peak * (floor + (1.0 - floor) * 0.5 * (1.0 + jnp.cos(jnp.pi * progress)))


@schedule("linear_floor", needs=("final_lr_fraction",))
def _linear_floor(o, step, peak, warmup, total):
    """word2vec.c's: a linear fall from the peak towards 0 at total_steps, held at
    final_lr_fraction of the peak once it gets there (word2vec.c's 1e-4)."""
    floor = float(o.final_lr_fraction)
    return peak * jnp.maximum(floor, 1.0 - step / max(total, 1))


@schedule("slanted_triangular", warmup=False, needs=("stlr_ratio",))
def _slanted_triangular(o, step, peak, warmup, total):
    """ULMFiT's (Howard and Ruder 2018, eq. 3): a linear rise from peak/ratio to the peak
    at warmup_steps (their cut), then a linear fall back to peak/ratio at total_steps;
    ratio is stlr_ratio (32 in the paper)."""
    ratio = float(o.stlr_ratio)
    cut = max(warmup, 1)
    p = jnp.where(step < cut, step / cut, 1.0 - (step - cut) / max(total - cut, 1))
    return peak * (1.0 + jnp.clip(p, 0.0, 1.0) * (ratio - 1.0)) / ratio


@schedule("warmup_stable_decay", needs=("decay_steps",))
def _warmup_stable_decay(o, step, peak, warmup, total):
    """ModernBERT's trapezoid (Warner et al. 2024): the warmup, the peak held, and over
    the last decay_steps a 1 - sqrt decay to 0 (Hägele et al. 2024), or to
    final_lr_fraction of the peak where a recipe sets one (Ettin's phases: 0.5, 0.04)."""
    decay = max(int(o.decay_steps), 1)
    progress = jnp.clip((step - (total - decay)) / decay, 0.0, 1.0)
    floor = float(o.get("final_lr_fraction", 0.0))
    return peak * (floor + (1.0 - floor) * (1.0 - jnp.sqrt(progress)))


@schedule("one_cycle", warmup=False, needs=("cycle_start", "cycle_falloff"))
def _one_cycle(o, step, peak, warmup, total):
    """The crammed BERT's triangle (their budget-triangle2): from cycle_start x peak a
    linear rise to the peak at 1 - cycle_falloff of the run, then a linear fall to 0 at
    its end (with optimizer.budget_hours the run's end is its time)."""
    start, falloff = float(o.cycle_start), float(o.cycle_falloff)
    p = step / max(total, 1)
    return peak * jnp.clip(jnp.minimum(start + p * (1 - start) / (1 - falloff),
                                       (1 - p) / falloff), 0.0, 1.0)


def learning_rate_schedule(opt_cfg, total_steps: int):
    """Step -> learning rate, for the schedule `opt_cfg.schedule`."""
    peak = opt_cfg.learning_rate
    warmup = max(int(opt_cfg.warmup_steps), 0)
    chosen = SCHEDULES[opt_cfg.schedule]

    def rate(step):
        step = jnp.asarray(step, jnp.float32)
        after = chosen.rate(opt_cfg, step, peak, warmup, total_steps)
        if not chosen.warmup:
            return after
        return jnp.where(step < warmup, peak * step / max(warmup, 1), after)

    return rate


def require_keys(opt_cfg, field: str, needs) -> None:
    """The optimizer keys that `optimizer.FIELD`'s choice reads, present (one line naming
    the first missing one)."""
    for key in needs:
        if key not in opt_cfg:
            raise UserError(f"optimizer.{field}={opt_cfg[field]!r} needs config key "
                            f"'optimizer.{key}', which this config does not set (set it "
                            "in the config file, as the recipes that use it do)")


def check(opt_cfg) -> None:
    """optimizer.schedule is one of SCHEDULES, with the keys it reads (one line)."""
    if opt_cfg.schedule not in SCHEDULES:
        raise UserError(f"config key 'optimizer.schedule' is {opt_cfg.schedule!r}; expected "
                        f"one of {', '.join(SCHEDULES)}")
    require_keys(opt_cfg, "schedule", SCHEDULES[opt_cfg.schedule].needs)
    if opt_cfg.stlr_ratio < 1:
        raise UserError(f"config key 'optimizer.stlr_ratio' is {opt_cfg.stlr_ratio}; the "
                        "slanted triangle's peak / lowest rate must be >= 1 (ULMFiT: 32)")
