"""Fine-tuning as train/loop.py's `run_steps` runs it: a run over epochs of the task's
shuffled rows (what the loop asks of a run: `step`, `end`, `next_batch`, `train_step`,
`stopping`), and the two hooks fine-tuning has: the progress line and metrics every
`log_every` steps, and the scores at each epoch's end that choose the kept epoch."""

import time

import jax
import numpy as np

from pretrainx.errors import UserError
from pretrainx.train import metrics as metrics_lib
from pretrainx.train import step as step_lib
from pretrainx.train.hooks import Hook


def rows(arrays, index):
    return {k: v[index] for k, v in arrays.items()}


class Epochs:
    """`epochs` passes over `train` (dict of arrays, one row per example) in batches of
    `batch`, each epoch in its own order (a permutation keyed by the seed and the epoch,
    so the batch at a step is a function of the step); the last partial batch is
    dropped, as run_classifier.py does. `step_fn` is the compiled train step."""

    def __init__(self, train, batch, epochs, seed, state, step_fn, to_global, mesh_replicated):
        self.train, self.batch, self.seed = train, batch, seed
        self.per_epoch = len(train["weight"]) // batch
        self.state, self.step_fn, self.to_global = state, step_fn, to_global
        self.key, self.replicated = jax.random.key(seed + 1), mesh_replicated
        self.step, self.end, self.stopping = 0, self.per_epoch * epochs, False
        self.order = None

    def epoch(self, step: int) -> int:
        """The epoch (from 1) that step `step` (from 0) belongs to."""
        return step // self.per_epoch + 1

    def next_batch(self):
        within = self.step % self.per_epoch
        if within == 0 or self.order is None:
            n = len(self.train["weight"])
            self.order = np.random.default_rng([self.seed, self.epoch(self.step)]).permutation(n)
        index = self.order[within * self.batch:(within + 1) * self.batch]
        return self.to_global(rows(self.train, index))

    def train_step(self, batch, schedule_step: int, every: int = 1):
        self.state, metrics = self.step_fn(self.state, batch, self.key,
                                           step_lib.clock(schedule_step, every, self.replicated))
        self.step += 1
        return metrics


class Progress(Hook):
    """Every `log_every` steps and at each epoch's end: the interval's mean metrics to
    metrics.jsonl and the progress line; `max_skipped_steps` non-finite steps in a row
    stop the run in one line."""

    def __init__(self, writer, log_every: int, max_skipped: int):
        self.writer, self.log_every, self.max_skipped = writer, log_every, max_skipped
        self.buffer, self.skipped_run = [], 0
        self.restart()

    def restart(self):
        self.buffer, self.began = [], time.perf_counter()

    def after_step(self, run, step_metrics):
        self.buffer.append(step_metrics)
        if run.step % self.log_every and run.step % run.per_epoch:
            return []
        host = jax.device_get(self.buffer)
        for m in host:
            self.skipped_run = self.skipped_run + 1 if m["skipped"] else 0
            if self.skipped_run >= self.max_skipped:
                raise UserError(f"loss or gradient not finite for {self.skipped_run} "
                                f"consecutive steps up to step {run.step} "
                                f"(max_skipped_steps={self.max_skipped})")
        record = {k: float(np.mean([h[k] for h in host])) for k in host[0]}
        record.update(step=run.step, epoch=run.epoch(run.step - 1),
                      learning_rate=float(host[-1]["learning_rate"]),
                      steps_per_sec=len(host) / (time.perf_counter() - self.began))
        self.writer.write(record)
        extra = f" | accuracy {record['accuracy']:.4f}" if "accuracy" in record else ""
        print(f"epoch {record['epoch']} step {run.step}/{run.end} | loss {record['loss']:.4f}"
              f"{extra} | lr {record['learning_rate']:.2e} | "
              f"{record['steps_per_sec']:.1f} steps/s", flush=True)
        self.restart()
        return [record]


class EpochEnd(Hook):
    """At each epoch's end the split that chooses (dev, or the held-out training rows)
    is scored; the best epoch so far is kept (`keep(result, best, params)`: its scores,
    `best` to add to, its parameters). `score(params) -> (scores, the one that chooses)`."""

    def __init__(self, writer, chooser: str, score, keep, progress: Progress):
        self.writer, self.chooser, self.score, self.keep = writer, chooser, score, keep
        self.progress = progress
        self.history, self.best, self.best_params = [], None, None

    def after_step(self, run, step_metrics):
        if run.step % run.per_epoch:
            return []
        result = {"epoch": run.epoch(run.step - 1), "step": run.step, "split": self.chooser}
        scores, main = self.score(run.state.params)
        result.update(scores)
        self.history.append(result)
        self.writer.write(result)
        metrics_lib.log(f"{self.chooser:<8}epoch {result['epoch']} | " + " | ".join(
            f"{k} {v:.4f}" for k, v in result.items() if k not in ("epoch", "step", "split")))
        if self.best is None or main > self.best["main"]:
            self.best = dict(result, main=main)
            self.best_params = jax.device_get(run.state.params)
            self.keep(result, self.best, self.best_params)
        self.progress.restart()  # the scoring's time is not the next interval's
        return [result]
