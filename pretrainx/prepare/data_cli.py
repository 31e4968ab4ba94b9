"""The data CLI (`python -m pretrainx.data` runs it; it sits beside main.py because it
builds the objective's examples and the run's datasets, which the data package may not
import):

python -m pretrainx.data --config=configs/NAME.py --stats [--num_batches=N] [--show=K]
    [--phase_name=NAME]
python -m pretrainx.data prepare --config=configs/NAME.py --output=DIR [--workers=N]
python -m pretrainx.data build_tfds --input=GLOB[,GLOB] --data_dir=DIR [--name=NAME]

--stats prints one JSON object about the training batches the run would see (the same
dataset, seed and phase-1 shapes, or with --phase those of a named phase: its mix, its
temperature, its masking): packing_efficiency (real tokens / all tokens),
examples_per_row, tokens_per_sec of the pipeline, each source's drawn and expected
share, and the objective's own figures. --show=K first prints K decoded examples for a person to read.
"""

import json
import sys
import time

import numpy as np
from absl import flags

from pretrainx import cli, objectives, phasing
from pretrainx import config as config_lib
from pretrainx.data import pipeline, sources, tfds_text
from pretrainx.data.tokenizers import load_tokenizer
from pretrainx.errors import UserError
from pretrainx.prepare import examples as prepare
from pretrainx.train import phases as phases_lib

_STATS = flags.DEFINE_bool("stats", False, "Print batch statistics as one JSON object.")
_NUM_BATCHES = flags.DEFINE_integer("num_batches", 20, "Batches to measure.")
_SHOW = flags.DEFINE_integer("show", 0, "Decode this many examples to stderr first.")
_OUTPUT = flags.DEFINE_string("output", None, "prepare: directory for the ArrayRecord shards.")
_WORKERS = flags.DEFINE_integer("workers", 0, "prepare: worker processes (0: one per core).")
_INPUT = flags.DEFINE_string("input", None, "build_tfds: comma-separated globs of text files.")
_DATA_DIR = flags.DEFINE_string("data_dir", None, "build_tfds: the TFDS data_dir to write.")
_NAME = flags.DEFINE_string("name", "default", "build_tfds: the dataset's config name.")
# not --phase: pretrainx.plan.planner's absl flag (a phase's number) has that name in one process
_PHASE = flags.DEFINE_string("phase_name", None, "--stats: the named phase's batches "
                             "(default: the first phase's).")
_COMMANDS = ("prepare", "build_tfds")


def batch_statistics(cfg, num_batches: int, show: int = 0, out=sys.stderr,
                     phase_name: str | None = None) -> dict:
    objectives.validate(cfg)
    config_lib.require_data(cfg)
    tokenizer = load_tokenizer(cfg.data.tokenizer, lower_case=cfg.data.lower_case)
    phase = config_lib.phases(cfg)[0] if phase_name is None else \
        phasing.by_name(cfg, phase_name, key="--phase_name")
    objective = objectives.build(phase.cfg, tokenizer)  # the phase's, as it trains
    start = time.perf_counter()
    dataset, signature = phases_lib.train_data(phase.cfg, objective, phase)
    iterator = pipeline.make_iterator(dataset)
    first = next(iterator)
    setup_sec = time.perf_counter() - start
    for text in objective.show(first, show):
        print(text, file=out)
    totals, tokens = objective.batch_stats(first), 0
    start = time.perf_counter()
    for _ in range(max(num_batches - 1, 0)):
        batch = next(iterator)
        tokens += sum(v.size for k, v in batch.items() if k in objective.token_features)
        totals = {k: totals[k] + v for k, v in objective.batch_stats(batch).items()}
    elapsed = time.perf_counter() - start
    return {
        "objective": cfg.objective,
        "batches": num_batches,
        "global_batch_size": phase.global_batch_size,
        "packing_efficiency": totals["real_tokens"] / max(totals["all_tokens"], 1),
        "examples_per_row": totals["examples"] / max(totals["rows"], 1),
        "tokens_per_sec": tokens / elapsed if elapsed > 0 else None,
        "setup_sec": setup_sec,
        "sources": objective.corpus.stats,
        **({"phase": phase.name} if phase.name else {}),
        **source_fractions(phase.cfg, signature["weights"],
                           num_batches * phase.global_batch_size),
        **objective.summarize_stats(totals, phase),
    }


def source_fractions(cfg, weights, rows: int) -> dict:
    """The share of each train source in the rows drawn (measured) and its sampling
    probability (expected: data.train_weights, or tokens^alpha normalised)."""
    names = sources.source_names(cfg.data.train_files, cfg.data.train_source_names)
    counts = np.bincount(pipeline.row_sources(weights, rows), minlength=len(names))
    return {"source_fractions": {n: float(c) / rows for n, c in zip(names, counts)},
            "expected_source_fractions": dict(zip(names, map(float, weights)))}


def _prepare(argv) -> int:
    cfg = cli.config(argv)
    if not _OUTPUT.value:
        raise UserError("--output=DIR is required for prepare")
    if _WORKERS.value < 0:
        raise UserError(f"--workers={_WORKERS.value} must be >= 0")
    manifest = prepare.prepare(cfg, _OUTPUT.value, _WORKERS.value)
    summary = {"output": _OUTPUT.value, **manifest["timing"], "sources": {
        name: {"documents": s["documents"], "tokens": s["tokens"],
               "skipped_lines": s["stats"]["skipped_lines"],
               "truncated_files": s["stats"]["truncated_files"],
               "examples": {k: v["count"] for k, v in s["examples"].items()}}
        for name, s in manifest["sources"].items()}}
    print(json.dumps(summary))
    return 0


def _build_tfds(argv) -> int:
    if len(argv) > 1:
        raise UserError(f"unexpected arguments: {' '.join(argv[1:])}")
    if not _INPUT.value or not _DATA_DIR.value:
        raise UserError("build_tfds needs --input=GLOB and --data_dir=DIR")
    print(tfds_text.build(_INPUT.value, _DATA_DIR.value, _NAME.value))
    return 0


def run(argv) -> int:
    if len(argv) > 1 and argv[1] in _COMMANDS:
        rest = [argv[0]] + argv[2:]
        return _prepare(rest) if argv[1] == "prepare" else _build_tfds(rest)
    cfg = cli.config(argv)
    if not (_STATS.value or _SHOW.value):
        raise UserError("nothing to do: pass --stats and/or --show=K")
    if _NUM_BATCHES.value < 1:
        raise UserError(f"--num_batches={_NUM_BATCHES.value} must be at least 1")
    result = batch_statistics(cfg, _NUM_BATCHES.value, _SHOW.value, phase_name=_PHASE.value)
    if _STATS.value:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    cli.main(run)
