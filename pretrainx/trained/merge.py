"""Checkpoint averaging and merging into a new workdir.

    python -m pretrainx.merge --inputs=RUN/checkpoints/800,RUN/checkpoints/900,RUN \\
        [--weights=1,1,2] --output=NEW_WORKDIR
    python -m pretrainx.merge --method=ties --base=PRETRAINED --inputs=FT_A,FT_B \\
        [--density=0.2] [--scale=1.0] --output=NEW_WORKDIR
    python -m pretrainx.merge --from_ema --inputs=RUN --output=NEW_WORKDIR

An input is a pretraining checkpoint (WORKDIR/checkpoints/STEP, or a WORKDIR for its
newest) or a fine-tuning workdir (its best epoch); all inputs are of one kind, one
family and one shape, or the command stops in one line naming what differs.

- `average` (the default): the weighted mean of the parameters (weights normalised;
  equal without --weights): the last k checkpoints of one run (checkpoint averaging),
  or the decay-phase variants of several runs (mmBERT's merge), or fine-tuning seeds of
  one task (a model soup).
- `--from_ema`: each input's moving average of its parameters (a run trained with
  optimizer.ema_decay > 0) stands for its parameters; one input is enough, so that the
  average can be evaluated, exported or fine-tuned as a workdir of its own.
- `ties` (Yadav et al. 2023, TIES-Merging): each input's task vector (input - base)
  keeps its `density` largest-magnitude entries, each entry's sign is elected by the
  sum of the trimmed vectors, and the entries that agree with it are averaged; base +
  scale x that. Parameters the base lacks (fine-tuned task heads) are averaged.

The output is a workdir like the newest input's (the first of a fine-tuning merge), with
the merged parameters in place of its own (a pretraining checkpoint keeps that input's
step, optimizer state, data position and config; a fine-tuning workdir its
finetune.json), so it evaluates,
fine-tunes (init_from), exports and loads as any other, and `merge.json` says what it
was made from. Nothing is written when an input is refused; the output must be new or
empty.
"""

import argparse
import json
import os
import sys

import jax
import numpy as np
import orbax.checkpoint as ocp

from pretrainx import models
from pretrainx.errors import UserError, json_command
from pretrainx.train import optim

MERGE_FILE = "merge.json"
FINETUNE_FILE = "finetune.json"  # interop.workdir's


# --- arrays ------------------------------------------------------------------------


def average(trees: list, weights) -> dict:
    """The weighted mean of trees of one structure (weights normalised to sum 1)."""
    w = np.asarray(weights, np.float64)
    w = w / w.sum()
    return jax.tree_util.tree_map(
        lambda *leaves: sum(float(wi) * np.asarray(x, np.float64) for wi, x in zip(w, leaves))
        .astype(np.asarray(leaves[0]).dtype), *trees)


def threshold(deltas: list, density: float) -> float:
    """The magnitude at or above which round(density x size) entries of a task vector
    (its tensors' changes, together) lie: TIES trims the whole vector, not each tensor."""
    magnitudes = np.concatenate([np.abs(d).ravel() for d in deltas])
    keep = int(round(density * magnitudes.size))
    if keep >= magnitudes.size:
        return 0.0
    if keep <= 0:
        return np.inf
    return float(np.partition(magnitudes, magnitudes.size - keep)[magnitudes.size - keep])


def ties_leaf(base: np.ndarray, inputs: list, thresholds: list, scale: float) -> np.ndarray:
    """TIES-Merging of one tensor: trim (each input at its vector's threshold), elect the
    sign by the trimmed changes' sum, average the changes that agree with it."""
    deltas = np.stack([np.asarray(x, np.float64) - base for x in inputs])
    cut = np.asarray(thresholds).reshape((-1,) + (1,) * base.ndim)
    deltas = np.where(np.abs(deltas) >= cut, deltas, 0.0)
    sign = np.sign(deltas.sum(axis=0))
    agree = (np.sign(deltas) == sign) & (deltas != 0)
    count = agree.sum(axis=0)
    merged = np.where(count > 0, (deltas * agree).sum(axis=0) / np.maximum(count, 1), 0.0)
    return (base + scale * merged).astype(np.asarray(inputs[0]).dtype)


def ties(base: dict, trees: list, density: float, scale: float) -> dict:
    """TIES over trees of one structure; a leaf the base lacks is averaged. A base that
    holds fewer than half of the inputs' values (another layout) is refused."""
    flat_base = dict(jax.tree_util.tree_flatten_with_path(base)[0])
    paths, structure = jax.tree_util.tree_flatten_with_path(trees[0])
    leaves = [jax.tree_util.tree_leaves(t) for t in trees]
    tuned = [i for i, (p, x) in enumerate(paths)
             if p in flat_base and np.shape(flat_base[p]) == np.shape(x)]
    shared = sum(np.size(paths[i][1]) for i in tuned)
    total = sum(np.size(x) for _, x in paths)
    if shared < total / 2:
        raise UserError(f"the base holds {shared:,} of the inputs' {total:,} parameter values "
                        "at their places: it is not the model they were tuned from")
    bases = {i: np.asarray(flat_base[paths[i][0]], np.float64) for i in tuned}
    thresholds = [threshold([np.asarray(tree_leaves[i]) - bases[i] for i in tuned], density)
                  for tree_leaves in leaves]
    out = []
    for i in range(len(paths)):
        column = [np.asarray(tree_leaves[i]) for tree_leaves in leaves]
        out.append(ties_leaf(bases[i], column, thresholds, scale) if i in bases
                   else average(column, [1.0] * len(column)))
    return jax.tree_util.tree_unflatten(structure, out)


def check_same(trees: list, names: list) -> None:
    """One structure and one shape for every leaf, or one line naming the first that
    differs and where."""
    first = dict(jax.tree_util.tree_flatten_with_path(trees[0])[0])
    for tree, name in zip(trees[1:], names[1:]):
        other = dict(jax.tree_util.tree_flatten_with_path(tree)[0])
        for path in list(first) + [p for p in other if p not in first]:  # in tree order
            a, b = first.get(path), other.get(path)
            where = jax.tree_util.keystr(path)
            if a is None or b is None:
                raise UserError(f"{name} {'lacks' if b is None else 'has an extra'} parameter "
                                f"{where} that {names[0]} {'has' if b is None else 'lacks'}: "
                                "only models of one shape merge")
            if np.shape(a) != np.shape(b):
                raise UserError(f"{name}'s {where} is {list(np.shape(b))}, {names[0]}'s "
                                f"{list(np.shape(a))}: only models of one shape merge")


# --- workdirs ----------------------------------------------------------------------


class Checkpoint:
    """One input: a pretraining checkpoint or a fine-tuning workdir, read whole."""

    def __init__(self, spec: str):
        self.spec = spec.rstrip("/")
        if os.path.isfile(os.path.join(self.spec, FINETUNE_FILE)):
            self.kind, self.workdir, self.step = "finetune", self.spec, None
            with open(os.path.join(self.spec, FINETUNE_FILE), encoding="utf-8") as f:
                self.info = json.load(f)
            self.family = models.family_name(self.info["model"])
            with ocp.StandardCheckpointer() as ckptr:
                self.params = self._read(lambda: ckptr.restore(
                    os.path.abspath(os.path.join(self.spec, "best"))))
            return
        self.kind = "pretrain"
        parent, last = os.path.split(self.spec)
        if last.isdigit() and os.path.basename(parent) == "checkpoints":
            self.workdir, self.step = os.path.dirname(parent), int(last)
        else:
            self.workdir, self.step = self.spec, None
        folder = os.path.abspath(os.path.join(self.workdir, "checkpoints"))
        if not os.path.isdir(folder):
            raise UserError(f"{spec}: neither WORKDIR/checkpoints/STEP, a pretraining workdir "
                            f"nor a fine-tuning workdir (no {folder}, no {FINETUNE_FILE})")
        manager = ocp.CheckpointManager(folder, item_names=("state", "data", "config"))
        try:
            held = sorted(manager.all_steps())
            self.step = held[-1] if self.step is None and held else self.step
            if self.step not in held:
                raise UserError(f"{spec}: {folder} holds no checkpoint at step {self.step} "
                                f"(it holds {held})")
            restored = self._read(lambda: manager.restore(self.step, args=ocp.args.Composite(
                state=ocp.args.StandardRestore(), data=ocp.args.JsonRestore(),
                config=ocp.args.JsonRestore())))
        finally:
            manager.close()
        self.state = jax.tree_util.tree_map(np.asarray, dict(restored["state"]))
        self.data, self.config = restored["data"], restored["config"]
        self.family = models.family_name(self.config["model"])
        self.params = self.state["params"]

    def _read(self, restore):
        try:
            return restore()
        except Exception as e:  # noqa: BLE001 - a damaged checkpoint: say which
            raise UserError(f"{self.spec} does not restore: {type(e).__name__}: "
                            f"{str(e).splitlines()[0][:160]}") from None


def _write(first: Checkpoint, params, output: str, record: dict) -> None:
    os.makedirs(output, exist_ok=True)
    if first.kind == "finetune":
        with ocp.StandardCheckpointer() as ckptr:
            ckptr.save(os.path.abspath(os.path.join(output, "best")), params)
        with open(os.path.join(output, FINETUNE_FILE), "w", encoding="utf-8") as f:
            json.dump(dict(first.info, merged_from=record["inputs"]), f, indent=1,
                      sort_keys=True)
    else:
        state = dict(first.state, params=params)
        manager = ocp.CheckpointManager(os.path.abspath(os.path.join(output, "checkpoints")),
                                        item_names=("state", "data", "config"))
        try:
            manager.save(first.step, args=ocp.args.Composite(
                state=ocp.args.StandardSave(state), data=ocp.args.JsonSave(first.data),
                config=ocp.args.JsonSave(first.config)))
            manager.wait_until_finished()
        finally:
            manager.close()
        with open(os.path.join(output, "config.json"), "w", encoding="utf-8") as f:
            json.dump(first.config, f, indent=1, sort_keys=True)
    with open(os.path.join(output, MERGE_FILE), "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)


def _ema(checkpoint: Checkpoint) -> dict:
    """A checkpoint's parameter average (optimizer.ema_decay), shaped as its parameters."""
    ema = None
    if checkpoint.kind == "pretrain" and checkpoint.config["optimizer"].get("ema_decay"):
        ema = optim.ema_of(checkpoint.state["opt_state"],
                           checkpoint.config["optimizer"]["ema_decay"])
    if ema is None:
        raise UserError(f"{checkpoint.spec} holds no average of its parameters: train with "
                        "--config.optimizer.ema_decay=0.999 (or another decay in (0, 1))")
    return jax.tree_util.tree_map(lambda e, p: np.asarray(e, np.float32).astype(p.dtype),
                                  ema, checkpoint.params)


def merge(inputs: list, output: str, method: str = "average", weights=None, base=None,
          density: float = 0.2, scale: float = 1.0, from_ema: bool = False) -> dict:
    """Merges checkpoints `inputs` (paths) into the new workdir `output`; returns the
    record written to output/merge.json."""
    if method not in ("average", "ties"):
        raise UserError(f"--method={method}: expected average or ties")
    if len(inputs) < (1 if from_ema else 2):
        raise UserError(f"--inputs names {len(inputs)} checkpoints; a merge takes at least "
                        f"{1 if from_ema else 2}")
    if os.path.isdir(output) and os.listdir(output):
        raise UserError(f"--output={output} is not empty; give a new or empty directory")
    weights = [1.0] * len(inputs) if weights is None else [float(w) for w in weights]
    if len(weights) != len(inputs) or not all(w > 0 for w in weights):
        raise UserError(f"--weights={','.join(map(str, weights))}: expected {len(inputs)} "
                        "positive numbers, one an input")
    if method == "ties" and (base is None or not 0 < density <= 1):
        raise UserError("--method=ties needs --base (the model the inputs were tuned from) "
                        f"and --density in (0, 1], got base={base!r}, density={density}")
    read = [Checkpoint(p) for p in inputs]
    for c in read[1:]:
        if (c.kind, c.family) != (read[0].kind, read[0].family):
            raise UserError(f"{c.spec} is a {c.family} {c.kind} checkpoint, {read[0].spec} a "
                            f"{read[0].family} {read[0].kind} one: only one kind and family "
                            "merge")
    trees = [_ema(c) if from_ema else c.params for c in read]
    check_same(trees, [c.spec for c in read])
    record = {"method": method, "inputs": [c.spec for c in read],
              "steps": [c.step for c in read], "weights": weights, "from_ema": from_ema}
    if method == "average":
        params = average(trees, weights)
    else:
        origin = Checkpoint(base)
        if origin.family != read[0].family:
            raise UserError(f"--base={base} is a {origin.family} model, the inputs "
                            f"{read[0].family}: the base must be the model they were tuned from")
        params = ties(origin.params, trees, density, scale)
        record.update(base=origin.spec, density=density, scale=scale)
        del record["weights"]
    newest = max(read, key=lambda c: -1 if c.step is None else c.step)  # first of equals
    _write(newest, params, output, record)
    return record


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pretrainx.merge", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inputs", required=True, help="comma-separated checkpoints")
    parser.add_argument("--output", required=True, help="the new workdir")
    parser.add_argument("--method", default="average", help="average | ties")
    parser.add_argument("--weights", default="", help="average: comma-separated weights")
    parser.add_argument("--base", default=None, help="ties: the model the inputs were tuned from")
    parser.add_argument("--density", type=float, default=0.2, help="ties: share of each task "
                        "vector's entries kept")
    parser.add_argument("--scale", type=float, default=1.0, help="ties: lambda")
    parser.add_argument("--from_ema", action="store_true",
                        help="merge the inputs' parameter averages (optimizer.ema_decay)")
    args = parser.parse_args(argv)

    def run():
        weights = [w for w in args.weights.split(",") if w.strip()] or None
        try:
            weights = None if weights is None else [float(w) for w in weights]
        except ValueError:
            raise UserError(f"--weights={args.weights}: expected comma-separated numbers") from None
        record = merge([p for p in args.inputs.split(",") if p.strip()], args.output,
                       args.method, weights, args.base, args.density, args.scale,
                       args.from_ema)
        return dict(record, output=args.output)
    return json_command(run)


if __name__ == "__main__":
    sys.exit(main())
