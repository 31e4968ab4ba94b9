"""One cell of a comparison: its pretraining (resumed where it stopped) and its fine-tunings
(each task x seed x learning rate its own workdir, read back when done), summarised in
CELL/cell.json. A rerun computes only what is missing.

Per task and seed, the learning rate and the epoch are the ones the held-out training
rows score best (finetune's data.holdout_examples); the dev score there is the seed's
result; a task reports the mean and the standard deviation over seeds, in points.
Nothing is chosen on dev. A family with no fine-tuning head (ELMo, GPT-2)
reports its pretraining figures alone.
"""

import json
import os
import statistics

from pretrainx import models, objectives, pretrain
from pretrainx.compare import grid as grid_lib, json_files
from pretrainx.finetune import loop as finetune_loop
from pretrainx.finetune.config import finetune_config
from pretrainx.train import loop

CELL_FILE = "cell.json"
CHOICE_FILE = "choice.json"


def finetunable(cfg) -> bool:
    family = models.FAMILIES.find(models.family_name(cfg.model))
    return family is not None and family.finetune_model is not None


def _run_figures(cfg, workdir: str, imported) -> dict:
    """One run's steps, FLOPs spent, losses and steps/s, from its metrics.jsonl."""
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    train = [r for r in records if r.get("split", "train") == "train" and "loss" in r]
    evals = [r for r in records if r.get("split") == "eval" and r.get("source") is None]
    steps = max([r["step"] for r in train + evals] or [0])  # a budget ends between logs
    early = next((r for r in train if r["step"] >= 0.1 * steps), train[0] if train else {})
    rates = [r["tokens_per_sec"] for r in train if "tokens_per_sec" in r]
    rates = rates[1:] or rates  # the first window holds the compilation
    # FLOPs spent, phase by phase (a phased recipe's steps differ in length and batch)
    spent = sum(max(0, min(end, steps) - start) * per_step
                for start, end, per_step in grid_lib.phase_flops(cfg, imported))
    return {"steps": steps, "spent": spent,
            "steps_per_second": (statistics.median(rates) / (cfg.global_batch_size
                                                             * cfg.seq_len)
                                 if rates else None),
            "early_loss": early.get("loss"), "early_step": early.get("step"),
            "final_loss": train[-1]["loss"] if train else None,
            "eval_loss": evals[-1]["loss"] if evals else None}


def pretraining_summary(cfg, workdir: str) -> dict:
    """Params, FLOPs a step, steps, steps/s, early and final train loss, eval loss. A
    staged recipe's steps and FLOPs are all its stages' (FLOPs a step their mean), its
    losses and steps/s its last stage's (WORKDIR; the earlier in WORKDIR/FOLDER)."""
    imported = pretrain.imported_models(cfg) or None  # a teacher's forward pass counts
    runs = [_run_figures(stage_cfg, os.path.join(workdir, folder), imported)
            for folder, stage_cfg in objectives.stages(cfg)]
    steps, spent = sum(r["steps"] for r in runs), sum(r["spent"] for r in runs)
    last = runs[-1]
    return {"params": loop.describe(cfg)["params"],
            "flops_per_step": spent / steps if steps else grid_lib.phase_flops(cfg)[0][2],
            "steps": steps, **{k: v for k, v in last.items() if k not in ("steps", "spent")}}


def _finetune_cfg(grid, task: dict, init_from: str, seed: int, lr: float):
    c = finetune_config()
    c.task, c.init_from, c.seed = task["task"], init_from, seed
    c.data.glue_dir = grid.glue_dir
    c.data.max_train_examples, c.data.holdout_examples = task["rows"], task["held_out"]
    c.seq_len, c.epochs, c.global_batch_size = task["seq_len"], task["epochs"], task["batch"]
    c.optimizer.learning_rate = lr
    c.log_every = 1_000_000
    c.predict_test = False  # dev is what a comparison reports
    return c


def chosen_by_holdout(seeds, learning_rates, finetune) -> dict:
    """{"mean", "std" (points, over seeds), "runs"}: per seed, the rate whose best epoch
    scored highest on the held-out rows, and the dev score there. `finetune(seed, lr)`
    gives a fine-tuning's best record (finetune.loop's, with "main" and "dev_main")."""
    chosen = []
    for seed in seeds:
        runs = [(best["main"], lr, best) for lr in learning_rates
                for best in [finetune(seed, lr)]]
        held_out, lr, best = max(runs, key=lambda r: r[0])
        chosen.append({"seed": seed, "lr": lr, "epoch": best["epoch"], "holdout": held_out,
                       "dev": best["dev_main"]})
    devs = [100 * c["dev"] for c in chosen]
    return {"mean": statistics.mean(devs), "std": statistics.pstdev(devs), "runs": chosen}


def finetune_task(grid, task: dict, init_from: str, folder: str) -> dict:
    """One task's chosen_by_holdout, each fine-tuning read back when done before."""
    def finetune(seed, lr):
        workdir = os.path.join(folder, f"s{seed}_lr{lr:g}")
        best = json_files.read(os.path.join(workdir, CHOICE_FILE))
        if best is None:
            cfg = _finetune_cfg(grid, task, init_from, seed, lr)
            best = json_files.write(os.path.join(workdir, CHOICE_FILE),
                                    finetune_loop.train(cfg, workdir)["best"])
        return best
    return chosen_by_holdout(grid.seeds, grid.learning_rates, finetune)


def run(grid, name: str, root: str, log=print) -> dict | None:
    """Cell `name` under `root`, trained and fine-tuned as far as it is not yet; None
    when its pretraining stopped before its end (a preemption's signal): nothing is
    fine-tuned from a half-trained model, and a rerun resumes the pretraining."""
    folder = os.path.join(root, name)
    done = json_files.read(os.path.join(folder, CELL_FILE))
    if done is not None:
        return done
    cfg = grid_lib.cell_config(grid, name, root)
    workdir = os.path.join(folder, "pretrain")
    log(f"compare: {name}: pretraining in {workdir}")
    if not pretrain.train(cfg, workdir)["complete"]:
        log(f"compare: {name}: pretraining stopped before its end; rerun to resume it")
        return None
    record = {"cell": name, "config": grid.cells[name]["config"],
              "set": grid.cells[name].get("set", {}), "budget": grid_lib.budget_of(grid, name),
              **pretraining_summary(cfg, workdir), "tasks": {}}
    if finetunable(cfg):
        for task_name, task in grid.tasks.items():
            log(f"compare: {name}: fine-tuning {task_name}")
            record["tasks"][task_name] = finetune_task(
                grid, task, workdir, os.path.join(folder, "finetune", task_name))
        means = [t["mean"] for t in record["tasks"].values()]
        record["task_mean"] = statistics.mean(means) if means else None
    else:
        record["task_mean"] = None
        record["note"] = "no fine-tuning head: pretraining figures only"
    return json_files.write(os.path.join(folder, CELL_FILE), record)


def status(grid, root: str) -> list:
    """[(cell, "done" | "pretrained" | "missing", fine-tunings done / all)]."""
    rows = []
    runs = len(grid.tasks) * len(grid.seeds) * len(grid.learning_rates)
    for name in grid.cells:
        folder = os.path.join(root, name)
        done = sum(os.path.isfile(os.path.join(folder, "finetune", t, f"s{s}_lr{lr:g}",
                                               CHOICE_FILE))
                   for t in grid.tasks for s in grid.seeds for lr in grid.learning_rates)
        if os.path.isfile(os.path.join(folder, CELL_FILE)):
            state = "done"
        elif os.path.isdir(os.path.join(folder, "pretrain", "checkpoints")):
            state = "pretraining started"
        else:
            state = "missing"
        rows.append((name, state, f"{done}/{runs}"))
    return rows
