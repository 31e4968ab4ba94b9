"""Packed BERT pairs against one pair a row: padding and useful tokens per second.

    python benchmarks/packing.py [--seq_lens=128,512] [--steps=60] [--window=10]
                                 [--files=GLOB,...]

For each length, BERT's MLM + NSP recipe (the quickstart's BERT-Tiny shape) trains
`--steps` steps twice on the same pairs: one pair a row (the paper) and with
data.pack_examples (Krell et al. 2021: up to 3 pairs a row, each isolated). Padding
is counted over every row of the epoch; tokens/s is the train loop's (rows x length
per second), timed in windows of `--window` steps after the first (compilation), and
"useful" is tokens/s x (1 - padding): the real tokens a second. The packed step does
a little more work per row (3 x the prediction slots, the NSP head at 3 places).
Default text: WikiText-2 (valid + test) and the eight Gutenberg books of
../shared/data/corpus (the bundled three when that is absent). The last line is one
JSON object keyed by length, each with padding, tokens/s (median, min, max) and useful
tokens/s both ways, and their ratio.
"""

import argparse
import glob
import json
import os
import pathlib
import statistics
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SHARED = REPO.parent / "shared" / "data" / "corpus"


def _default_files() -> str:
    wiki = [SHARED / "wikitext-2-raw" / n for n in ("wiki.valid.raw", "wiki.test.raw")]
    books = sorted(glob.glob(str(SHARED / "gutenberg" / "*.txt")))
    if all(p.exists() for p in wiki) and books:
        return ",".join([str(p) for p in wiki] + books)
    return ",".join(sorted(glob.glob(str(REPO / "pretrainx" / "assets" / "text" / "*.txt"))))


def _config(seq_len: int, pack: bool, files: str, steps: int, window: int):
    from pretrainx.config import load_file
    c = load_file(str(REPO / "configs" / "quickstart.py"))
    c.seq_len, c.global_batch_size = seq_len, 32 * 128 // seq_len  # 4,096 tokens a step
    c.data.max_predictions_per_seq = round(0.15 * seq_len + 0.5)
    c.data.train_files, c.data.eval_files, c.data.dupe_factor = files, "", 1
    c.data.pack_examples = pack
    c.total_steps, c.log_every = steps, window
    c.eval_every = c.checkpoint_every = steps
    c.mesh.data = 1
    return c


def _padding(cfg) -> float:
    from pretrainx import config as config_lib, objectives
    from pretrainx.data.tokenizers import load_tokenizer
    objective = objectives.build(cfg, load_tokenizer(cfg.data.tokenizer, lower_case=True))
    rows = objective.examples(cfg.data.train_files, config_lib.phases(cfg)[0], True)
    real = sum(int(r["input_ids"].size) for r in rows)
    return 1 - real / (len(rows) * cfg.seq_len)


def _tokens_per_sec(cfg) -> list:
    import jax
    from pretrainx.train import loop
    workdir = tempfile.mkdtemp(prefix="pretrainx-packing-")
    loop.train(cfg, workdir, devices=jax.devices()[:1])
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        rates = [json.loads(line).get("tokens_per_sec") for line in f]
    return [r for r in rates if r][1:]  # the first window holds the compilation


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seq_lens", default="128,512")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--files", default="")
    args = parser.parse_args()
    files = args.files or _default_files()
    out = {}
    for seq_len in (int(x) for x in args.seq_lens.split(",")):
        row = {}
        for pack in (False, True):
            cfg = _config(seq_len, pack, files, args.steps, args.window)
            padding, rates = _padding(cfg), _tokens_per_sec(cfg)
            median = statistics.median(rates)
            row["packed" if pack else "unpacked"] = {
                "padding_fraction": round(padding, 4),
                "tokens_per_sec": {"median": round(median), "min": round(min(rates)),
                                   "max": round(max(rates)), "windows": len(rates)},
                "useful_tokens_per_sec": round(median * (1 - padding))}
        row["useful_ratio"] = round(row["packed"]["useful_tokens_per_sec"]
                                    / row["unpacked"]["useful_tokens_per_sec"], 3)
        out[str(seq_len)] = row
        for way in ("unpacked", "packed"):
            r = row[way]
            print(f"length {seq_len} {way:9s} padding {r['padding_fraction']:.3f}  tokens/s "
                  f"{r['tokens_per_sec']['median']:,} (min {r['tokens_per_sec']['min']:,}, max "
                  f"{r['tokens_per_sec']['max']:,})  useful {r['useful_tokens_per_sec']:,}",
                  file=sys.stderr)
        print(f"length {seq_len}: packed / unpacked useful tokens/s = {row['useful_ratio']}",
              file=sys.stderr)
    print(json.dumps({"files": files, "steps": args.steps, "lengths": out}))


if __name__ == "__main__":
    main()
