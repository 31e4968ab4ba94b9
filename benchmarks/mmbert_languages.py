"""mmBERT's claim in miniature: languages added only in the decay phase are learned there.

    python benchmarks/mmbert_languages.py [--workdir=DIR] [--steps=1500,500,500]

Trains configs/mmbert_quickstart.py (four languages, then six, then all eight, the
masking rate and the temperature falling), then two more decays from the extension's
last checkpoint, as mmBERT trains its decay mixes: `cont` (the extension's six
languages only, mmBERT's Decay-Cont) and `eng` (all eight, English drawn four times as
often as each other language, its Decay-Eng); `all` is the run's own decay. The three
are merged with `pretrainx.trained.merge` (the average, and TIES from the extension's model).
Every model is evaluated on all eight languages' held-out documents as the decay phase
evaluates (rows of 256 tokens, 15% masking, the same masked rows for every model, every
batch once; a phase's end with the RoPE bases it trained with), against each
language's most-frequent-piece guesser: the share of its held-out pieces that its most
frequent training piece makes up (what always guessing that piece scores under uniform
masking). For the languages seen only in the decay it prints what the decay taught
them: the decay that adds them against the one that does not (`cont`). Prints a table
row a model; the last line is one JSON object. Evaluations, not timings: one run each.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

from lifecycle import ALL_BATCHES, model_differences, with_model_of  # noqa: E402
from pretrainx import config as config_lib, objectives, phasing, pretrain  # noqa: E402
from pretrainx.trained import merge
from pretrainx.data import corpus as corpus_lib, sources  # noqa: E402
from pretrainx.train import loop  # noqa: E402

QUICKSTART = os.path.join(REPO, "configs", "mmbert_quickstart.py")


def quickstart(steps=None, model=None):
    cfg = config_lib.load_file(QUICKSTART)
    cfg.model.update(model or {})  # the smoke test's smaller network
    if steps:
        for name, n in zip(cfg.phase_order.split(","), steps):
            cfg.phases[name].steps = n
        cfg.total_steps = sum(steps)
        cfg.phases.decay.optimizer.decay_steps = steps[-1]
        cfg.optimizer.decay_steps = steps[-1]
        cfg.optimizer.warmup_steps = min(cfg.optimizer.warmup_steps, steps[0])
        cfg.checkpoint_every = min(steps)
    return cfg


def decay_variants(cfg) -> dict:
    """{name: the decay phase's data keys}: the run's own (`all`) and mmBERT's two others."""
    extension = cfg.phases.extension.data
    decay = cfg.phases.decay.data
    names = decay.train_source_names.split(",")
    english_heavy = ",".join("4" if n == "en" else "1" for n in names)
    return {"all": {},
            "cont": {"train_files": extension.train_files,
                     "train_source_names": extension.train_source_names},
            "eng": {"train_weights": english_heavy}}


def branch(run_dir, step, out_dir) -> None:
    """A new workdir that resumes from `run_dir`'s checkpoint `step` (optimizer state and
    data position included), as mmBERT starts each decay mix from one checkpoint."""
    shutil.copytree(os.path.join(run_dir, "checkpoints", str(step)),
                    os.path.join(out_dir, "checkpoints", str(step)))


def guessers(cfg) -> dict:
    """{language: share of its held-out pieces that are its most frequent training piece}."""
    tokenizer = objectives.load_tokenizer(cfg)  # as the run reads it: its tokens are shared
    special = np.asarray(sorted(int(i) for i in tokenizer.special_ids()), np.int64)
    corpus = corpus_lib.Corpus(cfg, tokenizer)
    out = {}
    for name, spec in zip(sources.source_names(cfg.data.train_files, cfg.data.train_source_names),
                          sources.split_sources(cfg.data.train_files)):
        def pieces(train):  # in order, the special ids left out
            docs = corpus.split_documents(spec, train)
            ids = np.concatenate([s for d in docs for s in d]).astype(np.int64)
            return ids[~np.isin(ids, special)]
        train_ids = pieces(True)
        counts = np.bincount(train_ids)
        # the most frequent piece, ties to the one seen first (as Counter.most_common)
        tied = np.flatnonzero(counts == counts.max())
        top = train_ids[np.isin(train_ids, tied)][0]
        held_out = pieces(False)
        out[name] = float(np.mean(held_out == top))
    return out


def evaluate(workdir, step, cfg, scratch, batches=ALL_BATCHES) -> dict:
    """{language: eval MLM accuracy} of checkpoint `step` of `workdir`, evaluated as `cfg`'s
    decay phase (all languages, its length and masked rows) on every batch."""
    one = tempfile.mkdtemp(dir=scratch)
    shutil.copytree(os.path.join(workdir, "checkpoints", str(step)),
                    os.path.join(one, "checkpoints", str(step)))
    cfg = cfg.copy_and_resolve_references()
    cfg.eval_steps = batches
    result = loop.evaluate(cfg, one, phase="decay")
    return {**{k: v["mlm_accuracy"] for k, v in result["sources"].items()},
            "all": result["eval"]["mlm_accuracy"]}


def measure(workdir, cfg, batches=ALL_BATCHES) -> dict:
    phases = phasing.phases(cfg)
    ends = {p.name: p.end for p in phases}
    decay_cfg = phasing.by_name(cfg, "decay", key="phase").cfg
    added = {}
    for p in phases:
        for name in p.cfg.data.train_source_names.split(","):
            added.setdefault(name, p.name)
    rows = {}
    start = time.time()
    with tempfile.TemporaryDirectory() as scratch:
        for p in phases[:-1]:  # with the model keys it trained with (its RoPE bases)
            own = with_model_of(cfg, phases[-1], p) if model_differences(phases[-1], p) else cfg
            rows[f"end of {p.name}"] = evaluate(workdir, p.end, own, scratch, batches)
        finals = []
        for name, data in decay_variants(cfg).items():
            run = workdir
            if data:
                run = os.path.join(workdir, f"decay-{name}")
                if not os.path.isdir(os.path.join(run, "checkpoints", str(ends["decay"]))):
                    shutil.rmtree(run, ignore_errors=True)
                    branch(workdir, ends["extension"], run)
                    variant = cfg.copy_and_resolve_references()
                    variant.phases.decay.data.update(data)
                    pretrain.train(variant, run)
            rows[f"decay {name}"] = evaluate(run, ends["decay"], cfg, scratch, batches)
            finals.append(os.path.join(run, "checkpoints", str(ends["decay"])))
        base = os.path.join(workdir, "checkpoints", str(ends["extension"]))
        for method in ("average", "ties"):
            out = os.path.join(scratch, f"merged-{method}")
            merge.merge(finals, out, method=method,
                        base=base if method == "ties" else None)
            rows[f"merged ({method})"] = evaluate(out, ends["decay"], cfg, scratch, batches)
    guess = guessers(decay_cfg)
    late = {n: {"after_extension": rows["end of extension"][n],
                "decay_with_it": rows["decay all"][n], "decay_without_it": rows["decay cont"][n],
                "guesser": guess[n]} for n, when in added.items() if when == "decay"}
    for d in late.values():
        d["learned_in_decay"] = d["decay_with_it"] - d["decay_without_it"]
        d["over_guesser"] = d["decay_with_it"] - d["guesser"]
    return {"workdir": workdir, "added_in": added, "guesser": guess, "accuracy": rows,
            "added_in_decay": late,
            "steps": {p.name: p.end - p.start for p in phases},
            "seconds_evaluating_and_decays": round(time.time() - start, 1)}


def table(result) -> str:
    names = list(result["guesser"])
    lines = ["| model | " + " | ".join(f"{n} ({result['added_in'][n]})" for n in names)
             + " | all |", "|---" * (len(names) + 2) + "|"]
    for model, accuracy in result["accuracy"].items():
        lines.append(f"| {model} | " + " | ".join(f"{accuracy[n]:.3f}" for n in names)
                     + f" | {accuracy['all']:.3f} |")
    lines.append("| most-frequent-piece guesser | "
                 + " | ".join(f"{result['guesser'][n]:.3f}" for n in names) + " | |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", default=None,
                        help="where the run is (trained unless finished there)")
    parser.add_argument("--steps", default="", help="the three phases' steps (default: "
                        "the quickstart's)")
    parser.add_argument("--eval_batches", type=int, default=ALL_BATCHES,
                        help="batches a language (default: every one once)")
    parser.add_argument("--model", type=json.loads, default={},
                        help="smoke test: model keys over the quickstart's, as JSON")
    args = parser.parse_args()
    steps = [int(s) for s in args.steps.split(",") if s.strip()] or None
    cfg = quickstart(steps, args.model)
    workdir = args.workdir or tempfile.mkdtemp(prefix="mmbert-")
    start = time.time()
    pretrain.train(cfg, workdir)
    trained = time.time() - start
    result = measure(workdir, cfg, args.eval_batches)
    result["seconds_training"] = round(trained, 1)
    print(table(result), flush=True)
    for name, d in result["added_in_decay"].items():
        print(f"{name}, seen only in the decay: {d['after_extension']:.3f} before it, "
              f"{d['decay_with_it']:.3f} after the decay that adds it ({d['decay_without_it']:.3f} "
              f"after the one that does not: {d['learned_in_decay']:+.3f}); its guesser "
              f"{d['guesser']:.3f} ({d['over_guesser']:+.3f})", flush=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
