"""A wall-clock budget (optimizer.budget_hours): the learning rate, and the batch-size
ramp, as functions of elapsed time, as Izsak et al. (2021) and the crammed BERT
(Geiping and Goldstein 2022) schedule them.

Before each step the host turns the elapsed fraction p of the budget into the step
that the optimizer's schedules read (train/ramp.py's clock_at, which the train step
receives as an argument), p x total_steps (total_steps is then only the
schedule's resolution and the most steps a run may take), and, with
optimizer.batch_ramp, into how many steps' gradients one update averages (train/ramp.py:
rising to optimizer.accumulate_to at p = batch_ramp, so global_batch_size is the
micro-batch: cramming's batch of 8,192 is 64 micro-batches of 128). The run ends at the
first step where p >= 1, with an eval and a checkpoint. Elapsed time counts from the
first step (compilation included, as theirs); a resumed run continues from the
time recorded for its checkpoint in WORKDIR/budget.json. Process 0's clock decides for
every process, so all of them take the same steps.
"""

import json
import os
import time

import jax
import numpy as np
from jax.experimental import multihost_utils



def enabled(cfg) -> bool:
    return bool(cfg.optimizer.budget_hours)


class Budget:
    """The hook (train/hooks.py's protocol) that runs the clock and records it for a
    resume; first in the list, so the step it ends is evaluated and saved by the rest."""

    def __init__(self, run):
        self.seconds = float(run.cfg.optimizer.budget_hours) * 3600.0
        self.path = os.path.join(run.workdir, "budget.json")
        self.record = _read(self.path)
        self.before = _elapsed_at(self.record, run.step)
        self.started = None
        self.elapsed = self.before  # at the end of the last step: what the next one reads
        self.spent = False  # the run ended because the time was spent

    def _now(self) -> float:
        elapsed = self.before + time.perf_counter() - self.started
        if jax.process_count() > 1:
            elapsed = float(multihost_utils.broadcast_one_to_all(np.float64(elapsed)))
        return elapsed

    def before_step(self, run):
        if self.started is None:  # the clock starts at the first step
            self.started = time.perf_counter()

    def progress(self) -> float:
        """The share of the budget spent when the last step ended (0..1): what the
        schedules and the batch ramp of the next step follow (ramp.clock_at)."""
        return min(self.elapsed / self.seconds, 1.0)

    def last_step(self, run) -> int:
        """The step the run may train to: run.end, or where it is when a resumed run's
        recorded time already fills the budget (the clock is read after a step, so a
        rerun of a finished run would otherwise train one more)."""
        if self.before >= self.seconds and run.step < run.end:
            self.spent = True
            return run.step
        return run.end

    def time_is_up(self, run) -> bool:
        """Reads the clock once a step (one broadcast across hosts), after the step;
        True the first time the budget is spent before the run's last step."""
        self.elapsed = self._now()
        if self.elapsed >= self.seconds and run.step < run.end and not self.spent:
            self.spent = True
            return True
        return False

    def after_step(self, run, step_metrics):
        if run.step % run.cfg.checkpoint_every == 0 or run.step == run.end:
            self.record[str(run.step)] = self.elapsed
            if jax.process_index() == 0:
                with open(self.path, "w", encoding="utf-8") as f:
                    json.dump(self.record, f)
        return []

    def close(self):
        pass


def _read(path) -> dict:
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _elapsed_at(record: dict, step: int) -> float:
    """The elapsed seconds recorded at `step`; a checkpoint saved between records (a
    preemption) takes the last record before it plus the mean time of a step so far."""
    if not step or not record:
        return 0.0
    if str(step) in record:
        return record[str(step)]
    earlier = [int(s) for s in record if int(s) < step]
    if not earlier:
        return 0.0
    last = max(earlier)
    return record[str(last)] * step / last
