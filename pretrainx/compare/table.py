"""A comparison's results as Narang et al. (2021) table them: parameters, FLOPs a step,
steps/s, early and final loss, each task's mean and spread over seeds, the mean over
tasks; as Markdown, as JSON, and as a plot of the task mean against the compute spent."""

import json
import os


def _number(value, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _budget(budget: dict) -> str:
    return ", ".join(f"{v:g} {k}" for k, v in budget.items())


def markdown(records: list, grid) -> str:
    tasks = list(grid.tasks)
    budget = _budget(grid.budget)
    own = [f"{r['cell']} {_budget(r['budget'])}" for r in records
           if r.get("budget", grid.budget) != grid.budget]
    head = (["cell", "params", "FLOPs/step", "steps", "steps/s", "early loss", "final loss"]
            + [f"{t} (mean +- sd)" for t in tasks] + ["task mean"])
    lines = [f"Budget: {budget} a cell" + (f" ({'; '.join(own)})" if own else "")
             + f"; {len(grid.seeds)} seeds; learning rates "
             f"{', '.join(f'{lr:g}' for lr in grid.learning_rates)} chosen on held-out rows.",
             "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in records:
        scores = [f"{r['tasks'][t]['mean']:.1f} +- {r['tasks'][t]['std']:.1f}"
                  if t in r["tasks"] else "n/a" for t in tasks]
        lines.append("| " + " | ".join(
            [r["cell"], f"{r['params']:,}", f"{r['flops_per_step']:.3g}", f"{r['steps']:,}",
             _number(r["steps_per_second"], ".2f"), _number(r["early_loss"], ".3f"),
             _number(r["final_loss"], ".3f")] + scores
            + [_number(r.get("task_mean"), ".1f")]) + " |")
    return "\n".join(lines) + "\n"


def plot(records: list, path: str) -> str:
    """Task mean against FLOPs spent (FLOPs a step x steps), one point a cell; the path,
    or why there is none."""
    points = [(r["flops_per_step"] * r["steps"], r["task_mean"], r["cell"]) for r in records
              if r.get("task_mean") is not None]
    if not points:
        return "no cell was fine-tuned: no plot"
    try:
        import matplotlib
        matplotlib.use("Agg")
        from matplotlib import pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot"
    fig, ax = plt.subplots(figsize=(6, 4))
    for flops, mean, name in points:
        ax.scatter(flops, mean)
        ax.annotate(name, (flops, mean), fontsize=7, xytext=(3, 3), textcoords="offset points")
    spent = [flops for flops, _, _ in points]
    if max(spent) > 10 * min(spent):  # decades apart: log; else the minor labels collide
        ax.set_xscale("log")
    else:
        ax.ticklabel_format(axis="x", style="sci", scilimits=(0, 0))
    ax.set_xlabel("pretraining FLOPs spent")
    ax.set_ylabel("downstream mean (points)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write(records: list, grid, root: str) -> dict:
    """root/compare.md, root/compare.json and root/compare.png; what was written."""
    table = markdown(records, grid)
    with open(os.path.join(root, "compare.md"), "w", encoding="utf-8") as f:
        f.write(table)
    with open(os.path.join(root, "compare.json"), "w", encoding="utf-8") as f:
        json.dump({"grid": grid.path, "budget": grid.budget, "tasks": grid.tasks,
                   "seeds": list(grid.seeds), "learning_rates": list(grid.learning_rates),
                   "cells": records}, f, indent=1)
    return {"table": table, "plot": plot(records, os.path.join(root, "compare.png"))}
