"""ModernBERT at 8,192 tokens on a CPU: a few training steps of the quickstart's shape,
with the time a step takes and the process's peak memory.

    python benchmarks/long_context.py [--seq_len=8192] [--rows=2] [--steps=4]

configs/modernbert_quickstart.py's model (3 layers x 128: one global layer attending over
the whole row, two with the 32-token window) trains `--steps` steps of `--rows` packed
rows of `--seq_len` tokens from the bundled novels (the context extension's shape, at
CPU size), on one CPU device. Prints each window's seconds a step (the first step, which
compiles, left out), their median, min and max, and the peak resident memory (ru_maxrss)
beside the memory after start-up; the last line is one JSON object. Ours alone: no
reference trains this shape.
"""

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from pretrainx import config as config_lib, pretrain  # noqa: E402


def _rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seq_len", type=int, default=8192)
    parser.add_argument("--rows", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    cfg = config_lib.load_file(os.path.join(REPO, "configs", "modernbert_quickstart.py"))
    cfg.update_from_flattened_dict({
        "seq_len": args.seq_len, "global_batch_size": args.rows, "total_steps": args.steps,
        "log_every": 1, "eval_every": 10**9, "checkpoint_every": 10**9,
        "model.max_position_embeddings": args.seq_len,
        "data.max_predictions_per_seq": -(-3 * args.seq_len // 10),  # 30% of the row
        "data.eval_files": "", "optimizer.warmup_steps": 1, "optimizer.decay_steps": 1})
    started = _rss()
    stamps = []
    with tempfile.TemporaryDirectory() as workdir:
        pretrain.train(cfg, workdir, on_step=lambda step, _: stamps.append(time.perf_counter()))
    per_step = [b - a for a, b in zip(stamps, stamps[1:])]  # from step 1's end: compiled
    for i, s in enumerate(per_step, start=2):
        print(f"step {i}: {s:.2f} s", flush=True)
    out = {"seq_len": args.seq_len, "rows": args.rows, "tokens_per_step": args.seq_len * args.rows,
           "seconds_per_step": {"median": statistics.median(per_step), "min": min(per_step),
                                "max": max(per_step), "windows": len(per_step)},
           "rss_after_start": started, "peak_rss": _rss()}
    print(f"{args.rows} x {args.seq_len} tokens: median {out['seconds_per_step']['median']:.2f} s "
          f"a step (min {min(per_step):.2f}, max {max(per_step):.2f}); peak RSS "
          f"{out['peak_rss'] / 2**30:.2f} GiB (after start-up {started / 2**30:.2f} GiB)")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
