"""Fine-tuning as train/loop.py's `run_steps` runs it: a run over epochs of the task's
shuffled rows (what the loop asks of a run: `step`, `end`, `next_batch`, `train_step`,
`stopping`; what train/hooks.py's Checkpoint asks: `checkpoint_due`,
`save_checkpoint`), and the two hooks of fine-tuning's own: the progress line and
metrics every `log_every` steps, and the scores at each epoch's end that choose the
kept epoch. A checkpoint at each epoch's end (and when a signal stops the run) holds
the state, the step and the epochs scored so far, so a rerun resumes there."""

import json
import time

import jax
import numpy as np

from pretrainx import config as config_lib
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

    def __init__(self, train, batch, epochs, seed, state, step_fn, to_global, mesh_replicated,
                 ckpt, config_json: str):
        self.train, self.batch, self.seed = train, batch, seed
        self.per_epoch = len(train["weight"]) // batch
        self.state, self.step_fn, self.to_global = state, step_fn, to_global
        self.key, self.replicated = jax.random.key(seed + 1), mesh_replicated
        self.step, self.end, self.stopping = 0, self.per_epoch * epochs, False
        self.stopped_early = False  # set by EpochEnd: no better epoch for its patience
        self.ckpt, self.config_json = ckpt, config_json
        self.order = None
        # where the run stands besides its step: the epochs scored (EpochEnd's records)
        # and the best of them, with its parameters
        self.history, self.best, self.best_params = [], None, None

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

    def checkpoint_due(self) -> bool:
        return self.step % self.per_epoch == 0 or self.step == self.end

    def save_checkpoint(self, force: bool) -> None:
        best = self.best_params if self.best_params is not None else self.state.params
        self.ckpt.save(self.step, {"state": self.state, "best": best}, self, self.config_json,
                       force=force)

    def get_state(self) -> dict:
        """The data position a checkpoint holds: the step, and the epochs scored."""
        return {"step": self.step, "history": plain(self.history), "best": plain(self.best)}

    def set_state(self, saved: dict) -> None:
        self.step, self.history, self.best = saved["step"], saved["history"], saved["best"]
        self.order = None

    def train_step(self, batch, schedule_step: int, every: int = 1):
        self.state, metrics = self.step_fn(self.state, batch, self.key,
                                           step_lib.clock(schedule_step, every, self.replicated))
        self.step += 1
        return metrics


def plain(value):
    """JSON's types for a record's numpy scalars."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value.item() if hasattr(value, "item") else value


class Progress(Hook):
    """Every `log_every` steps and at each epoch's end: the interval's mean metrics to
    metrics.jsonl and the progress line; `max_skipped_steps` non-finite steps in a row
    stop the run in one line."""

    def __init__(self, writer, log_every: int, max_skipped: int):
        self.writer, self.log_every, self.max_skipped = writer, log_every, max_skipped
        self.skipped_run = 0
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
    is scored into run.history; the best epoch so far becomes run.best (with
    run.best_params) and is kept (`keep(result, best, params)`: its scores, `best` to
    add to, its parameters). `score(params) -> (scores, the one that chooses)`. With
    `patience` (early_stopping_epochs), that many epochs without a better score end
    the run at this step."""

    def __init__(self, writer, chooser: str, score, keep, progress: Progress,
                 patience: int = 0):
        self.writer, self.chooser, self.score, self.keep = writer, chooser, score, keep
        self.progress, self.patience = progress, patience

    def after_step(self, run, step_metrics):
        if run.step % run.per_epoch:
            return []
        result = {"epoch": run.epoch(run.step - 1), "step": run.step, "split": self.chooser}
        scores, main = self.score(run.state.params)
        result.update(scores)
        run.history.append(result)
        self.writer.write(result)
        metrics_lib.log(f"{self.chooser:<8}epoch {result['epoch']} | " + " | ".join(
            f"{k} {v:.4f}" for k, v in result.items() if k not in ("epoch", "step", "split")))
        if run.best is None or main > run.best["main"]:
            run.best = dict(result, main=main)
            run.best_params = jax.device_get(run.state.params)
            self.keep(result, run.best, run.best_params)
        elif self.patience and result["epoch"] - run.best["epoch"] >= self.patience:
            metrics_lib.log(f"early stop: {self.patience} epoch(s) without a better "
                            f"{self.chooser} score than epoch {run.best['epoch']}'s")
            run.end, run.stopped_early = run.step, True  # the run ends here, complete
        self.progress.restart()  # the scoring's time is not the next interval's
        return [result]


# Keys a resumed fine-tuning run may change (they change no step it trains; the
# state restores onto another mesh)
_RESUMABLE = ("log_every", "eval_batch_size", "predict_test", "mesh", "sharding_rules")


def resume(run, state, shardings, cfg) -> None:
    """The run at its newest checkpoint, if the workdir has one of this run: the state,
    the step, the epochs scored and the best epoch's parameters (kept in the checkpoint
    beside the state, so a resume needs nothing else). One of another run is refused."""
    ckpt = run.ckpt
    def check(saved: dict) -> None:
        old = config_lib.flatten(saved)
        new = config_lib.flatten(json.loads(cfg.to_json(sort_keys=True)))
        differ = [f"{k}: checkpoint {old.get(k)!r} vs config {new.get(k)!r}"
                  for k in sorted(set(old) | set(new))
                  if k.split(".")[0] not in _RESUMABLE and old.get(k) != new.get(k)]
        if differ:
            raise UserError(f"checkpoint in {ckpt.directory} was written by another "
                            f"fine-tuning run ({differ[0]}); use another workdir")
    restored = ckpt.restore({"state": state, "best": state.params},
                            {"state": shardings, "best": shardings.params}, lambda _: run, check)
    if restored is None:
        return
    saved = restored[1]
    run.state = saved["state"]
    if run.best is not None:
        run.best_params = jax.device_get(saved["best"])
    metrics_lib.log(f"resumed from {ckpt.directory}/{run.step}: epoch {run.epoch(run.step)}, "
                    f"{len(run.history)} epoch(s) scored")
