"""python -m pretrainx.data --config=configs/NAME.py --stats [--num_batches=N] [--show=K]

Prints one JSON object about the training batches the run would see (the same
dataset, seed and phase-1 shapes): packing_efficiency (real tokens / all
tokens), examples_per_row, tokens_per_sec of the pipeline, and the objective's
own figures. --show=K first prints K decoded examples for a person to read.
"""

import json
import sys
import time

from absl import flags

from pretrainx.errors import UserError
from pretrainx.main import cli, cli_config

_STATS = flags.DEFINE_bool("stats", False, "Print batch statistics as one JSON object.")
_NUM_BATCHES = flags.DEFINE_integer("num_batches", 20, "Batches to measure.")
_SHOW = flags.DEFINE_integer("show", 0, "Decode this many examples to stderr first.")


def batch_statistics(cfg, num_batches: int, show: int = 0, out=sys.stderr) -> dict:
    from pretrainx import config as config_lib, objectives
    from pretrainx.data import pipeline
    from pretrainx.data.tokenizers import load_tokenizer
    from pretrainx.train import loop

    config_lib.validate(cfg)
    config_lib.require_data(cfg)
    tokenizer = load_tokenizer(cfg.data.tokenizer, lower_case=cfg.data.lower_case)
    objective = objectives.build(cfg, tokenizer)
    phase = config_lib.phases(cfg)[0]
    start = time.perf_counter()
    dataset = loop.train_dataset(cfg, objective, phase)
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
        **objective.summarize_stats(totals, phase),
    }


def run(argv) -> int:
    cfg = cli_config(argv)
    if not (_STATS.value or _SHOW.value):
        raise UserError("nothing to do: pass --stats and/or --show=K")
    if _NUM_BATCHES.value < 1:
        raise UserError(f"--num_batches={_NUM_BATCHES.value} must be at least 1")
    result = batch_statistics(cfg, _NUM_BATCHES.value, _SHOW.value)
    if _STATS.value:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    cli(run)
