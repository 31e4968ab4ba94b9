"""What the train loop does around each step, one hook a job (Levanter's hooks are the
model): profile, log metrics, evaluate, switch phase, save (and stop on preemption).

Every hook has `before_step(run)`, `after_step(run, step_metrics) -> records logged`
and `close()`; the loop calls them in the order it was given them.
"""

import time

import jax
import numpy as np

from pretrainx.errors import UserError
from pretrainx.train import metrics as metrics_lib
from pretrainx.train import phases as phases_lib, preemption, profile as profile_lib, wandb_log


class Hook:
    def before_step(self, run) -> None:
        pass

    def after_step(self, run, step_metrics) -> list:
        return []

    def close(self) -> None:
        pass


class Profile(Hook):
    """A jax.profiler trace of `profile_steps` steps, past compilation and warm-up."""

    def __init__(self, run):
        cfg = run.cfg
        self.profiler = profile_lib.StepProfiler(run.workdir, run.start, cfg.profile_start_step,
                                                 cfg.profile_steps)

    def before_step(self, run):
        self.profiler.before_step(run.step)

    def after_step(self, run, step_metrics):
        self.profiler.after_step(run.step, step_metrics)
        return []

    def close(self):
        self.profiler.close()


def _summarise(buffer):
    """Average per-step metrics over the log interval, leaving out skipped steps
    (non-finite loss or gradient); learning rate: the last. Also returns which
    steps were skipped. A key some steps lack (an interval across a phase that switches
    the objective) is the mean of the steps that have it."""
    host = jax.device_get(buffer)
    skipped = [bool(m["skipped"]) for m in host]
    good = [m for m, s in zip(host, skipped) if not s] or host
    keys = dict.fromkeys(k for m in host for k in m if k != "skipped")
    out = {k: float(np.mean([m[k] for m in good if k in m] or [m[k] for m in host if k in m]))
           for k in keys}
    out["learning_rate"] = float(host[-1]["learning_rate"])
    out["skipped_steps"] = sum(skipped)
    return out, skipped


class Metrics(Hook):
    """Every `log_every` steps: the interval's mean metrics, tokens/s, MFU and
    `input_wait` (the share of the interval's wall clock the loop waited on the input
    pipeline: near 0 when the accelerator is the bound) to metrics.jsonl and
    TensorBoard, and the progress line. Only steps after the first of a phase (which
    compiles) count towards tokens/s, unless that step is all the interval has.
    `max_skipped_steps` non-finite steps in a row stop the run."""

    def __init__(self, run):
        sink = None
        if run.cfg.logging.wandb and jax.process_index() == 0:
            sink = wandb_log.WandbSink(run.workdir, run.cfg.logging, run.cfg.to_dict())
        self.writer = metrics_lib.MetricsWriter(run.workdir, run.cfg.total_steps, sink=sink)
        self.buffer, self.skip_run = [], 0
        self.seconds_per_step = float("nan")
        self.last = None
        self.fresh = True
        self.restart_interval(run)

    def phase_started(self, run):
        """A record naming the boundary (what the new phase is and sets); the next step
        compiles: leave it out of tokens/s."""
        phase = run.phase
        record = {"step": run.step, "split": "phase", "phase": phase.label,
                  "seq_len": phase.seq_len, "global_batch_size": phase.global_batch_size}
        if phase.changes:
            record["sets"] = phases_lib.sets(phase)
        self.writer.write(record)
        metrics_lib.log(f"step {run.step}: {phase.label} starts (seq_len {phase.seq_len}, "
                        f"global batch {phase.global_batch_size}"
                        + "".join(f", {k}={v}" for k, v in record.get("sets", {}).items()) + ")")
        self.fresh = True

    def restart_interval(self, run):
        self.interval_steps, self.interval_start = 0, time.perf_counter()
        self.interval_wait = run.input_wait_s

    def after_step(self, run, step_metrics):
        cfg, phase = run.cfg, run.phase
        self.buffer.append(step_metrics)
        self.interval_steps += 1
        if self.fresh:
            jax.block_until_ready(step_metrics)
            self.fresh = False
            if run.step % cfg.log_every:
                self.restart_interval(run)
        if run.step % cfg.log_every and run.step != run.end:
            return []
        record, skipped = _summarise(self.buffer)
        for bad in skipped:
            self.skip_run = self.skip_run + 1 if bad else 0
        if self.skip_run >= cfg.max_skipped_steps:
            raise UserError(
                f"loss or gradient not finite for {self.skip_run} consecutive steps up to "
                f"step {run.step} (max_skipped_steps={cfg.max_skipped_steps}); the last "
                f"good checkpoint is kept in {run.ckpt.directory}")
        elapsed = time.perf_counter() - self.interval_start
        self.seconds_per_step = elapsed / max(self.interval_steps, 1)
        tps = self.interval_steps * phase.global_batch_size * phase.seq_len / max(elapsed, 1e-9)
        waited = run.input_wait_s - self.interval_wait
        record.update(step=run.step, tokens_per_sec=tps,
                      input_wait=min(1.0, waited / max(elapsed, 1e-9)),
                      mfu=run.phases.objective_of(phase).flops_per_token(phase) * tps
                      / (run.peak * jax.device_count()),
                      seq_len=phase.seq_len, global_batch_size=phase.global_batch_size)
        self.write(record)
        self.last = record
        self.buffer = []
        self.restart_interval(run)
        return [record]

    def write(self, record):
        self.writer.write(record)
        self.writer.progress(record, self.seconds_per_step)

    def close(self):
        self.writer.close()


class Evaluate(Hook):
    """Every `eval_every` steps and at the last: eval metrics on the eval data, and with
    several eval sources one more record for each, carrying its `source` name."""

    def __init__(self, metrics: Metrics, stop=lambda: False):
        self.metrics, self.last, self.stop = metrics, None, stop

    def after_step(self, run, step_metrics):
        due = not run.step % run.cfg.eval_every or run.finished or (
            run.phase.name and phase_ends(run))  # a named phase's model, on its own data
        if not due or self.stop():
            return []  # asked to stop: the checkpoint first, not an evaluation
        return self.now(run)

    def now(self, run) -> list:
        """Evaluate the parameters as they are (also before the first step of a run that
        continues another model's training: its "before")."""
        result, by_source = run.phases.evaluate(run.phase, run.state.params, run.cfg.eval_steps,
                                                stop=self.stop)
        if self.stop():
            metrics_lib.log(f"evaluation at step {run.step} left unfinished: the run is "
                            "asked to stop")
        logged, named = [], {"phase": run.phase.name} if run.phase.name else {}
        if result is not None:
            self.last = dict(result, step=run.step, split="eval", **named)
            logged.append(self.last)
        for name, metrics in by_source.items():  # one record per eval source (language)
            logged.append(dict(metrics, step=run.step, split="eval", source=name, **named))
        for record in logged:
            self.metrics.write(record)
        self.metrics.restart_interval(run)  # eval time is not training time
        return logged


def phase_ends(run) -> bool:
    """This step is the last of a phase with another after it."""
    return run.phase.end <= run.step < run.cfg.total_steps


class PhaseSwitch(Hook):
    """At a phase's last step, the next phase's data; switched before saving, so the
    saved data position is the next phase's."""

    def __init__(self, metrics: Metrics):
        self.metrics = metrics

    def after_step(self, run, step_metrics):
        if phase_ends(run):
            run.phase = run.phases.at(run.step)
            run.iterator = run.phases.train_iterator(run.phase)
            self.metrics.phase_started(run)
        return []


class Checkpoint(Hook):
    """When the run says a save is due (`run.checkpoint_due()`: pretraining's every
    `checkpoint_every` steps and at the end, fine-tuning's at each epoch's end), and when
    a preemption notice or a signal (SIGTERM, Ctrl-C) asks the run to stop: then it
    saves (`run.save_checkpoint(force)`) and the loop ends. A save due at an evaluation
    step is made before it (`SaveBeforeEvaluation`)."""

    def __init__(self):
        self.stop = preemption.StopRequest().install()
        self.saved_at = None

    def _due(self, run) -> bool:
        return run.checkpoint_due()

    def _save(self, run, force: bool) -> None:
        run.save_checkpoint(force)
        self.saved_at = run.step

    def before_evaluation(self, run) -> None:
        """A save due at this step, written before the evaluation (asynchronously, so the
        two overlap): a kill during a long evaluation loses nothing. Not at a phase's
        last step, where the saved data position must be the next phase's."""
        if self._due(run) and not phase_ends(run):
            self._save(run, force=run.step == run.end)

    def after_step(self, run, step_metrics):
        preempted = bool(self.stop) or run.ckpt.reached_preemption(run.step)
        if (self._due(run) or preempted) and self.saved_at != run.step:
            self._save(run, force=run.step == run.end or preempted)
        run.stopping = preempted
        return []

    def close(self):
        self.stop.uninstall()

    def stop_requested(self) -> bool:
        """A signal asked the run to stop (what a long evaluation checks between batches).
        One process only: the hosts of a multi-host job must run the same evaluation
        batches (their collectives), and a signal reaches them one by one."""
        return bool(self.stop) and jax.process_count() == 1

    @property
    def signal_name(self):
        return self.stop.signal_name


class SaveBeforeEvaluation(Hook):
    """Checkpoint.before_evaluation as a hook, placed before Evaluate."""

    def __init__(self, checkpoint: Checkpoint):
        self.checkpoint = checkpoint

    def after_step(self, run, step_metrics):
        self.checkpoint.before_evaluation(run)
        return []
