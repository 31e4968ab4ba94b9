"""Sweeps over ml-collections configs: grid and random search, each trial a config
with a readable name and its own workdir; run here one after another, or emitted as
launch commands; results of every trial gathered into one table.

    from pretrainx.compare import sweep
    trials = sweep.grid(base, {"optimizer.learning_rate": [1e-4, 3e-4],
                               "model.num_layers": [2, 4]}, root="sweeps/lr")
    table = sweep.run(trials)                  # or: print(*sweep.commands(trials, CONFIG))

A failed trial is recorded with its error and the sweep goes on; running the same
sweep again skips the trials that finished.
"""

import csv
import dataclasses
import itertools
import json
import math
import os
import shlex
import traceback
from typing import Callable

import ml_collections
import numpy as np

from pretrainx import pretrain
from pretrainx.errors import UserError

RESULT_FILE = "trial.json"


@dataclasses.dataclass
class Trial:
    name: str
    overrides: dict  # "a.b" -> value
    config: ml_collections.ConfigDict
    workdir: str


def _format(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def trial_name(overrides: dict) -> str:
    """`learning_rate=0.0003,num_layers=4`: the last part of each key, filesystem-safe."""
    parts = [f"{key.rsplit('.', 1)[-1]}={_format(value)}" for key, value in overrides.items()]
    return ",".join(parts).replace("/", "_").replace(" ", "") or "base"


def apply_overrides(base, overrides: dict) -> ml_collections.ConfigDict:
    """A copy of `base` with dotted keys set; a key the base lacks is an error."""
    cfg = ml_collections.ConfigDict(base.to_dict())
    for key, value in overrides.items():
        target = cfg
        *path, last = key.split(".")
        try:
            for part in path:
                target = target[part]
            if last not in target:
                raise KeyError(last)
        except (KeyError, TypeError):
            raise UserError(f"sweep key '{key}' is not a key of the base config") from None
        target[last] = value
    return cfg


def _trials(base, combos, root) -> list:
    out, seen = [], set()
    for overrides in combos:
        name = trial_name(overrides)
        if name in seen:
            continue
        seen.add(name)
        out.append(Trial(name, overrides, apply_overrides(base, overrides), os.path.join(root, name)))
    return out


def grid(base, space: dict, root: str = "sweeps") -> list:
    """Every combination of the values in `space` ({"a.b": [v1, v2], ...})."""
    keys = list(space)
    combos = [dict(zip(keys, values)) for values in itertools.product(*space.values())]
    return _trials(base, combos, root)


def log_uniform(low: float, high: float):
    """A distribution for `random_search`: log-uniform between low and high."""
    return lambda rng: float(math.exp(rng.uniform(math.log(low), math.log(high))))


def random_search(base, space: dict, num_trials: int, seed: int = 0,
                  root: str = "sweeps") -> list:
    """`num_trials` draws: a list value is a choice, a callable(rng) a distribution
    (e.g. `log_uniform(1e-4, 1e-2)`). The same seed draws the same trials."""
    rng = np.random.default_rng(seed)
    combos = []
    for _ in range(num_trials):
        combo = {}
        for key, values in space.items():
            if callable(values):
                combo[key] = values(rng)
            else:
                combo[key] = values[int(rng.integers(len(values)))]
                if isinstance(combo[key], np.generic):
                    combo[key] = combo[key].item()
        combos.append(combo)
    return _trials(base, combos, root)


def commands(trials, config_path: str, tpu_vm: str = "") -> list:
    """One shell command per trial; `tpu_vm="--name=X --zone=Z --accelerator-type=T"`
    wraps each in launch/tpu_vm.sh train."""
    out = []
    for trial in trials:
        args = ["python", "-m", "pretrainx.main", f"--config={config_path}",
                f"--workdir={trial.workdir}"]
        args += [f"--config.{k}={v}" for k, v in trial.overrides.items()]
        command = " ".join(shlex.quote(a) for a in args)
        if tpu_vm:
            command = f"launch/tpu_vm.sh train {tpu_vm} -- {command}"
        out.append(command)
    return out


def _final_metrics(result: dict) -> dict:
    """Flat numbers of a train() result: train_*, eval_* (pretraining), best_* (fine-tuning)."""
    flat = {}
    for section in ("train", "eval", "best"):
        for key, value in (result.get(section) or {}).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                flat[f"{section}_{key}"] = value
    return flat


def _default_train(cfg, workdir):
    return pretrain.loop_for(cfg).train(cfg, workdir)


def run(trials, train_fn: Callable | None = None, metric: str = "eval_loss",
        mode: str = "min", root: str | None = None) -> list:
    """Train every trial not yet finished (in this process, one after another), then
    write ROOT/results.jsonl and ROOT/results.csv and print the best by `metric`."""
    train_fn = train_fn or _default_train
    rows = []
    for trial in trials:
        record_file = os.path.join(trial.workdir, RESULT_FILE)
        if os.path.isfile(record_file):
            with open(record_file, encoding="utf-8") as f:
                row = json.load(f)
            if row.get("status") == "done":
                print(f"sweep: {trial.name} finished before; skipped", flush=True)
                rows.append(row)
                continue
        print(f"sweep: {trial.name} -> {trial.workdir}", flush=True)
        row = {"trial": trial.name, "workdir": trial.workdir, **trial.overrides}
        try:
            row.update(_final_metrics(train_fn(trial.config, trial.workdir) or {}),
                       status="done")
        except Exception as e:  # one failure must not stop the sweep
            row.update(status="failed", error=f"{type(e).__name__}: {str(e).splitlines()[0]}"
                       if str(e) else type(e).__name__)
            print(f"sweep: {trial.name} failed: {row['error']}", flush=True)
            if not isinstance(e, UserError):
                traceback.print_exc()
        os.makedirs(trial.workdir, exist_ok=True)
        with open(record_file, "w", encoding="utf-8") as f:
            json.dump(row, f, sort_keys=True)
        rows.append(row)
    if rows:
        write_table(rows, root or os.path.dirname(trials[0].workdir))
        best_row = best(rows, metric, mode)
        if best_row is not None:
            print(f"sweep: best {metric} {best_row[metric]:.4f}: {best_row['trial']}", flush=True)
    return rows


def best(rows, metric: str, mode: str = "min"):
    done = [r for r in rows if r.get("status") == "done" and metric in r]
    if not done:
        return None
    return (min if mode == "min" else max)(done, key=lambda r: r[metric])


def write_table(rows, root: str) -> None:
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "results.jsonl"), "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, sort_keys=True) + "\n")
    columns = ["trial", "status"] + sorted({k for r in rows for k in r} - {"trial", "status"})
    with open(os.path.join(root, "results.csv"), "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
