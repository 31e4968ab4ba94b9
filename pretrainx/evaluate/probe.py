"""python -m pretrainx.probe --workdir=RUN [--step=N] [--task=sst2] [--glue_dir=DIR]
    [--retrieval_dir=DIR]
python -m pretrainx.probe cloze --workdir=RUN_OR_HF_DIR [--probes=FILE] [--step=N]

Fine-tunes checkpoints of a pretraining run on a small labelled task and logs the dev
score as probe/* scalars in RUN/metrics.jsonl and TensorBoard (split "probe", at the
checkpoint's step), so that a run shows time-to-GLUE beside its MLM loss, as MosaicBERT
reports. Without --step, every checkpoint that has no probe yet. The run's `probe.*`
config keys say what to fine-tune (the flags override them); train/downstream.py starts
this command in the background every probe.every_steps, with --nolog (the run logs).
Three tasks fine-tune nothing: `cloze` scores the checkpoint's masked LM on cloze probes
(pretrainx/evaluate/cloze.py), so that the curve shows when a model starts to know things; `sts`
scores its mean-pooled sentence embeddings on STS-B's dev pairs (Spearman of cosines,
pretrainx/evaluate/similarity.py) and `retrieval` on the BEIR-layout folder of probe.retrieval_dir
(MRR@10, recall@10, pretrainx/evaluate/retrieval.py), the way encoders are ranked on embeddings.
Task `contrastive` trains the embedder first (finetune/contrastive.py) and reports STS-B.

Each probe is RUN/probe/STEP: a fine-tuning workdir, and probe.json with its record.
The epoch is chosen on probe.holdout_examples held-out training rows, never on dev.
`cloze` alone scores one model (a run's latest checkpoint or --step, or an HF folder)
and prints its scores per category as one JSON line.
"""

import argparse
import json
import os
import sys
import time

import ml_collections

from pretrainx import config as config_lib
from pretrainx.compare import json_files
from pretrainx.errors import UserError
from pretrainx.evaluate import cloze, retrieval, similarity
from pretrainx.finetune import loop as finetune
from pretrainx.finetune.config import finetune_config
from pretrainx.trained import inference

# Tasks scored on the checkpoint's sentence embeddings, with no fine-tuning
EMBEDDING_TASKS = ("sts", "retrieval")
# What a fine-tuning result holds besides the dev metrics.
_NOT_METRICS = ("epoch", "step", "split", "main", "dev_main")


def settings(workdir: str, task: str | None = None, glue_dir: str | None = None,
             retrieval_dir: str | None = None):
    """The run's probe keys (config.json), with the overrides given."""
    path = os.path.join(workdir, "config.json")
    if not os.path.isfile(path):
        raise UserError(f"{workdir} has no config.json: not a pretrainx pretraining run")
    with open(path, encoding="utf-8") as f:
        saved = json.load(f)
    probe = config_lib.probe_defaults()
    probe.update(saved.get("probe") or {})
    for key, value in (("task", task), ("glue_dir", glue_dir),
                       ("retrieval_dir", retrieval_dir)):
        if value is not None:
            probe[key] = value
    missing = config_lib.probe_missing(probe)
    if missing:
        raise UserError(f"{path}: {missing} (or give --task and its folder flag)")
    return probe


def probe_config(probe, init_from: str) -> ml_collections.ConfigDict:
    c = finetune_config()
    c.task, c.init_from = probe.task, init_from
    c.data.glue_dir = probe.glue_dir
    c.data.max_train_examples = probe.max_train_examples
    c.data.holdout_examples = probe.holdout_examples
    c.epochs, c.seq_len = probe.epochs, probe.seq_len
    c.global_batch_size = probe.global_batch_size
    c.optimizer.learning_rate = probe.learning_rate
    c.log_every = 1_000_000
    c.predict_test = False  # a probe reports dev
    return c


def probe_step(workdir: str, step: int, probe) -> dict:
    """Fine-tune checkpoint `step` (or read back the probe done before); its record."""
    folder = os.path.join(workdir, "probe", str(step))
    done = os.path.join(folder, "probe.json")
    if (record := json_files.read(done)) is not None:
        return record
    start = time.perf_counter()
    checkpoint = os.path.join(workdir, "checkpoints", str(step))
    if probe.task in EMBEDDING_TASKS or probe.task == "cloze":
        os.makedirs(folder, exist_ok=True)
        record = cloze_record(checkpoint, probe.probes, step, start) \
            if probe.task == "cloze" else embedding_record(checkpoint, probe, step, start)
        return json_files.write(done, record)
    cfg = probe_config(probe, checkpoint)
    best = finetune.train(cfg, os.path.join(folder, "finetune"))["best"]
    record = {"split": "probe", "step": step, "task": probe.task,
              **{k: v for k, v in best.items()
                 if k not in _NOT_METRICS and not k.startswith("holdout_")},
              "chosen_epoch": best["epoch"], "seconds": time.perf_counter() - start}
    return json_files.write(done, record)


def cloze_record(model_path: str, probes: str, step, start: float) -> dict:
    """A probe record of the cloze scores of the model at `model_path`: overall
    precision@1 and @10 as floats (logged as probe/* scalars), the categories' in
    `categories`, and the counts."""
    result = cloze.score(inference.load(model_path),
                         cloze.read_probes(probes or cloze.DEFAULT_PROBES))
    return {"split": "probe", "step": step, "task": "cloze", **result,
            "seconds": time.perf_counter() - start}


def embedding_record(model_path: str, probe, step, start: float) -> dict:
    """A probe record of the model's mean-pooled embeddings scored with no training:
    STS-B dev (task sts) or the BEIR folder's test split (task retrieval)."""
    model = inference.load(model_path)
    if probe.task == "sts":
        result = similarity.sts(model, probe.glue_dir, "mean")
        scores = {k: result[k] for k in ("spearman", "pearson")}
        counts = {"pairs": result["pairs"]}
    else:
        result = retrieval.evaluate(model, probe.retrieval_dir, "test", "mean")
        scores = {k: result[k] for k in ("mrr_at_10", "recall_at_10")}
        counts = {"queries": result["queries"], "documents": result["documents"]}
    return {"split": "probe", "step": step, "task": probe.task, **scores, **counts,
            "seconds": time.perf_counter() - start}


def cloze_main(argv) -> None:
    parser = argparse.ArgumentParser(prog="python -m pretrainx.probe cloze",
                                     description=cloze.__doc__)
    parser.add_argument("--workdir", required=True,
                        help="a pretraining run (its latest checkpoint) or an HF folder")
    parser.add_argument("--probes", default="", help="the probe TSV (default: the shipped set)")
    parser.add_argument("--step", type=int, help="a checkpoint of the run")
    args = parser.parse_args(argv)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    path = (os.path.join(args.workdir, "checkpoints", str(args.step))
            if args.step is not None else args.workdir)
    try:
        record = cloze_record(path, args.probes, args.step, time.perf_counter())
    except UserError as e:
        raise SystemExit(f"error: {e}") from None
    print(json.dumps(record), flush=True)


def checkpoint_steps(workdir: str) -> list:
    folder = os.path.join(workdir, "checkpoints")
    if not os.path.isdir(folder):
        raise UserError(f"{workdir} has no checkpoints/")
    return sorted(int(n) for n in os.listdir(folder) if n.isdigit())


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["cloze"]:
        return cloze_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m pretrainx.probe", description=__doc__)
    parser.add_argument("--workdir", required=True, help="the pretraining run's workdir")
    parser.add_argument("--step", type=int, help="one checkpoint (default: every unprobed one)")
    parser.add_argument("--task", help="overrides probe.task")
    parser.add_argument("--glue_dir", help="overrides probe.glue_dir")
    parser.add_argument("--retrieval_dir", help="overrides probe.retrieval_dir")
    parser.add_argument("--nolog", dest="log", action="store_false",
                        help="leave RUN/metrics.jsonl and TensorBoard alone")
    args = parser.parse_args(argv)
    workdir = args.workdir
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    try:
        probe = settings(workdir, args.task, args.glue_dir, args.retrieval_dir)
        probed = os.path.join(workdir, "probe")
        steps = [args.step] if args.step is not None else [
            s for s in checkpoint_steps(workdir)
            if not os.path.isfile(os.path.join(probed, str(s), "probe.json"))]
        records = [probe_step(workdir, s, probe) for s in steps]
    except UserError as e:
        raise SystemExit(f"error: {e}") from None
    if args.log and records:
        from pretrainx.train import metrics as metrics_lib
        writer = metrics_lib.MetricsWriter(workdir, max(steps))
        for record in records:
            writer.write(record)
        writer.close()
    for record in records:
        print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
