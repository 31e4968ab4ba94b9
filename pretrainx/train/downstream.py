"""Downstream probes while pretraining (probe.every_steps > 0): time-to-GLUE, not only
MLM loss, as MosaicBERT reports its runs.

Every probe.every_steps (a multiple of checkpoint_every) the hook waits for that step's
checkpoint to commit and starts `python -m pretrainx.probe --step=STEP` in the
background (process 0 only, on probe.platform: the run keeps the accelerators). The
probe fine-tunes the checkpoint on probe.task into WORKDIR/probe/STEP; when it is done
the hook writes its record (split "probe", at the checkpoint's step) to metrics.jsonl
and TensorBoard (probe/accuracy, probe/f1, ...). The run waits for its probes when it
ends; a preempted or failed run stops them, and `python -m pretrainx.probe
--workdir=WORKDIR` does the missing ones later.
"""

import json
import os
import subprocess
import sys

import jax

from pretrainx.errors import UserError
from pretrainx.train import metrics as metrics_lib
from pretrainx.train.hooks import Hook


def enabled(cfg) -> bool:
    return bool(cfg.probe.every_steps)


class Probe(Hook):
    def __init__(self, run, metrics):
        self.run, self.writer = run, metrics.writer
        self.cfg = run.cfg.probe
        self.every = self.cfg.every_steps
        self.enabled = bool(self.every) and jax.process_index() == 0
        self.folder = os.path.join(run.workdir, "probe")
        self.pending = {}  # checkpoint step -> the probe's process
        if self.enabled and "://" in run.workdir:
            raise UserError(f"probe.every_steps needs a local workdir (the probe process "
                            f"writes beside the run); {run.workdir} is remote: run python -m "
                            "pretrainx.evaluate.probe on a copy instead")

    def _done(self, step) -> str:
        return os.path.join(self.folder, str(step), "probe.json")

    def after_step(self, run, step_metrics):
        records = self._collect(wait=False)
        step = run.step
        if (self.enabled and step % self.every == 0 and step not in self.pending
                and not os.path.isfile(self._done(step))):
            run.ckpt.wait()  # the probe reads the checkpoint: it must be committed
            self._start(step)
        return records

    def _start(self, step):
        folder = os.path.join(self.folder, str(step))
        os.makedirs(folder, exist_ok=True)
        env = dict(os.environ, JAX_PLATFORMS=self.cfg.platform)
        with open(os.path.join(folder, "probe.log"), "w", encoding="utf-8") as log:
            self.pending[step] = subprocess.Popen(
                [sys.executable, "-m", "pretrainx.probe", f"--workdir={self.run.workdir}",
                 f"--step={step}", "--nolog"],
                stdout=log, stderr=subprocess.STDOUT, env=env)

    def _collect(self, wait: bool) -> list:
        records = []
        for step, proc in sorted(self.pending.items()):
            if proc.poll() is None and not wait:
                continue
            proc.wait()
            del self.pending[step]
            if proc.returncode or not os.path.isfile(self._done(step)):
                metrics_lib.log(f"probe of step {step} failed (exit {proc.returncode}); see "
                                f"{self.folder}/{step}/probe.log")
                continue
            with open(self._done(step), encoding="utf-8") as f:
                record = json.load(f)
            self.writer.write(record)
            shown = " | ".join(f"{k} {v:.4f}" for k, v in record.items()
                               if isinstance(v, float) and k != "seconds")
            metrics_lib.log(f"probe  step {step} | {record['task']} | {shown} | "
                            f"{record['seconds']:.0f} s")
            records.append(record)
        return records

    def close(self):
        if getattr(self.run, "stopping", False) or self.run.step < self.run.end:  # cut short
            for proc in self.pending.values():
                proc.terminate()
        self._collect(wait=True)
