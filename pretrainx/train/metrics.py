"""Metrics a person can read: metrics.jsonl, a progress line, TensorBoard, MFU."""

import contextlib
import errno
import functools
import json
import math
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from pretrainx.train import chips
from pretrainx.errors import DiskFullError

@functools.lru_cache(maxsize=None)
def measured_matmul_peak(size: int = 1024, repeats: int = 5) -> float:
    """Best float32 FLOP/s of a jitted square matmul on this host's devices, which
    is what MFU is measured against on a CPU (no published peak fits every CPU)."""
    device = jax.local_devices()[0]
    a = jax.device_put(jnp.ones((size, size), jnp.float32), device)
    f = jax.jit(lambda x: x @ x)
    f(a).block_until_ready()
    best = math.inf
    for _ in range(repeats):
        t = time.perf_counter()
        f(a).block_until_ready()
        best = min(best, time.perf_counter() - t)
    return 2 * size ** 3 / best


def peak_flops_per_device() -> tuple:
    """(FLOP/s, where the figure comes from)."""
    kind = jax.devices()[0].device_kind
    known = chips.chip_of_device_kind(kind)
    if known:
        return known[1].peak_flops_per_device, f"table:{known[0]}"
    if jax.devices()[0].platform == "cpu":
        # Forced host devices share the same cores: the whole host's peak is measured
        # once and split between them.
        return measured_matmul_peak() / jax.local_device_count(), "measured-cpu-matmul"
    return float("nan"), f"unknown:{kind}"


def _fmt_duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


@contextlib.contextmanager
def _disk_full_is_one_line(file):
    try:
        yield
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
        raise DiskFullError(f"no space left on the device writing {file.name}") from None


def repair_torn_line(path: str) -> None:
    """A run killed by a full disk (or a kill) mid-record leaves a last line without its
    newline; the next run would append to it and every reader would then fail. The torn
    record (never whole) is cut off, and said so in one line."""
    try:
        with open(path, "rb+") as f:
            size = f.seek(0, os.SEEK_END)
            if size == 0:
                return
            f.seek(size - 1)
            if f.read(1) == b"\n":
                return
            keep = size
            while keep > 0:  # back to the end of the last whole line
                step = min(65536, keep)
                f.seek(keep - step)
                chunk = f.read(step)
                at = chunk.rfind(b"\n")
                if at >= 0:
                    keep = keep - step + at + 1
                    break
                keep -= step
            f.truncate(keep)
    except FileNotFoundError:
        return
    print(f"warning: {path} ended in a torn record ({size - keep} bytes, from a run stopped "
          "while writing it); cut back to its last whole line", file=sys.stderr, flush=True)


def _summary_writer(path: str):
    """tensorboardX's SummaryWriter, imported without PyTorch: tensorboardX imports torch
    whenever it is installed, only to accept torch tensors, which are never passed here
    (1.8 s of every run's start-up on 2 cores where transformers' reference stack is)."""
    if "tensorboardX" not in sys.modules and "torch" not in sys.modules:
        sys.modules["torch"] = None  # `import torch` raises ImportError, which it catches
        try:
            import tensorboardX  # noqa: F401
        finally:
            del sys.modules["torch"]
    from tensorboardX import SummaryWriter
    return SummaryWriter(path)


class MetricsWriter:
    """Writes on process 0 only; the others keep silent. `sink` (train/wandb_log.py's,
    made for process 0 only) gets every record too."""

    def __init__(self, workdir: str, total_steps: int, enabled: bool | None = None,
                 sink=None):
        self.enabled = jax.process_index() == 0 if enabled is None else enabled
        self.total_steps = total_steps
        self._file = None
        self._tb = None
        self._sink = sink
        if not self.enabled:
            return
        from etils import epath  # local paths and gs:// alike
        root = epath.Path(workdir)
        root.mkdir(parents=True, exist_ok=True)
        if "://" not in workdir:
            repair_torn_line(os.path.join(workdir, "metrics.jsonl"))
        self._file = (root / "metrics.jsonl").open("a")
        try:
            self._tb = _summary_writer(os.path.join(workdir, "tensorboard"))
        except Exception:  # TensorBoard is optional
            self._tb = None

    def write(self, record: dict) -> None:
        if not self.enabled:
            return
        record = {k: (float(v) if isinstance(v, (np.floating, np.integer, jax.Array)) else v)
                  for k, v in record.items()}
        line = json.dumps(record) + "\n"
        with _disk_full_is_one_line(self._file):
            start = self._file.tell() if self._file.seekable() else None
            try:
                self._file.write(line)
                self._file.flush()
            except OSError:  # a line cut by a full disk: take it back (whole lines only)
                if start is not None:
                    with contextlib.suppress(OSError):
                        os.truncate(self._file.name, start)
                raise
        if self._tb is not None:
            prefix = record.get("split", "train")
            if "source" in record:
                prefix = f"{prefix}/{record['source']}"
            for key, value in record.items():
                if isinstance(value, (int, float)) and key != "step":
                    self._tb.add_scalar(f"{prefix}/{key}", value, record["step"])
        if self._sink is not None:
            self._sink.log(record)

    def progress(self, record: dict, seconds_per_step: float) -> None:
        if not self.enabled:
            return
        step = record["step"]
        eta = (self.total_steps - step) * seconds_per_step
        if record.get("split") == "eval":
            where = f"eval {record['source']}" if "source" in record else "eval  "
            parts = [f"{where} step {step}/{self.total_steps}", f"loss {record['loss']:.4f}"]
            parts += [f"{k} {record[k]:.4f}" for k in record
                      if k.endswith("accuracy") or k.endswith("_loss")]
        else:
            parts = [f"step {step}/{self.total_steps}", f"loss {record['loss']:.4f}",
                     f"lr {record['learning_rate']:.2e}",
                     f"{record['tokens_per_sec']:,.0f} tok/s", f"MFU {record['mfu']:.1%}",
                     f"ETA {_fmt_duration(eta)}"]
        print(" | ".join(parts), flush=True)

    def close(self) -> None:
        if self._file:
            file, self._file = self._file, None
            with _disk_full_is_one_line(file):
                file.close()
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._sink is not None:
            sink, self._sink = self._sink, None
            sink.close()


def log(message: str) -> None:
    if jax.process_index() == 0:
        print(message, file=sys.stdout, flush=True)
