"""Packed examples against one example a row: padding and useful tokens per second.

    python benchmarks/packing.py [--objectives=bert,albert,roberta] [--seq_lens=128,512]
                                 [--steps=60] [--window=10] [--files=GLOB,...]

For each objective and length, the objective's recipe at the quickstart's BERT-Tiny
shape trains `--steps` steps twice on the same text: one example a row (the paper) and
with data.pack_examples (Krell et al. 2021: up to 3 examples a row, each isolated).
The examples are BERT's NSP pairs, ALBERT's sentence-order pairs and RoBERTa's rows:
unpacked, the paper's FULL-SENTENCES rows that run on across documents; packed, rows
that end with their document (DOC-SENTENCES', whose unpadded padding is printed too as
`doc_sentences_padding`). Padding is counted over every row of the epoch; tokens/s is
the train loop's (rows x length per second), timed in windows of `--window` steps after
the first (compilation), and "useful" is tokens/s x (1 - padding): the real tokens a
second. The packed step does a little more work per row (3 more prediction slots, the
pair head at 3 places). Default text: WikiText-2 (valid + test) and the eight
Gutenberg books of ../shared/data/corpus (the bundled three when that is absent);
RoBERTa reads GPT-2's byte-level BPE from ../shared/data/tokenizers/gpt2 (skipped
without it). The last line is one JSON object keyed by objective, then length, each
with padding, tokens/s (median, min, max) and useful tokens/s both ways, and their
ratio.
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
GPT2 = REPO.parent / "shared" / "data" / "tokenizers" / "gpt2"


def _default_files() -> str:
    wiki = [SHARED / "wikitext-2-raw" / n for n in ("wiki.valid.raw", "wiki.test.raw")]
    books = sorted(glob.glob(str(SHARED / "gutenberg" / "*.txt")))
    if all(p.exists() for p in wiki) and books:
        return ",".join([str(p) for p in wiki] + books)
    return ",".join(sorted(glob.glob(str(REPO / "pretrainx" / "assets" / "text" / "*.txt"))))


def _config(objective: str, seq_len: int, pack: bool, files: str, steps: int, window: int,
            model=None):
    from pretrainx.config import load_file
    quick = load_file(str(REPO / "configs" / "quickstart.py"))
    c = quick if objective == "bert" else load_file(str(REPO / "configs" / f"{objective}_base.py"))
    if objective != "bert":  # the quickstart's body and vocabulary under the objective
        body = {k: quick.model[k] for k in ("num_layers", "hidden_size", "num_heads",
                                            "mlp_dim", "dtype")}
        c.model.update(body)
        c.optimizer.learning_rate, c.optimizer.warmup_steps = 1e-3, 10
    if objective == "albert":
        c.model.update(embedding_size=128, vocab_size=quick.model.vocab_size)
        c.data.tokenizer, c.data.lower_case = quick.data.tokenizer, True
    if objective == "roberta":
        c.model.max_position_embeddings = seq_len + 2
        c.data.tokenizer = str(GPT2)
    c.model.update(model or {})  # the smoke test's smaller network
    c.seq_len, c.global_batch_size = seq_len, 32 * 128 // seq_len  # 4,096 tokens a step
    c.data.max_predictions_per_seq = round(0.15 * seq_len + 0.5)
    c.data.train_files, c.data.eval_files = files, ""
    if "dupe_factor" in c.data:
        c.data.dupe_factor = 1
    c.data.pack_examples = pack
    c.total_steps, c.log_every = steps, window
    c.eval_every = c.checkpoint_every = steps
    c.mesh.data = 1
    return c


def _padding(cfg) -> tuple:
    """The epoch's padding fraction, and for FULL-SENTENCES rows that of DOC-SENTENCES
    (the same whole-sentence rows ended at each document, unpacked)."""
    from pretrainx import config as config_lib, objectives
    from pretrainx.data.tokenizers import load_tokenizer
    from pretrainx.objectives import rows as rows_lib
    objective = objectives.build(cfg, load_tokenizer(cfg.data.tokenizer,
                                                     lower_case=cfg.data.lower_case))
    phase = config_lib.phases(cfg)[0]
    rows = objective.examples(cfg.data.train_files, phase, True)
    fraction = lambda rs: 1 - sum(int(r["input_ids"].size) for r in rs) / (  # noqa: E731
        len(rs) * cfg.seq_len)
    doc_sentences = None
    if cfg.objective == "roberta" and not cfg.data.pack_examples:
        docs = objective.corpus.documents(cfg.data.train_files)
        doc_sentences = fraction(rows_lib.sentence_rows(docs, cfg, phase, True, 0,
                                                        objective.tokenizer, False))
    return fraction(rows), doc_sentences


def _tokens_per_sec(cfg) -> list:
    import jax
    from pretrainx.train import loop
    workdir = tempfile.mkdtemp(prefix="pretrainx-packing-")
    loop.train(cfg, workdir, devices=jax.devices()[:1])
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        rates = [json.loads(line).get("tokens_per_sec") for line in f]
    return [r for r in rates if r][1:]  # the first window holds the compilation


def _measure(objective: str, seq_len: int, files: str, args) -> dict:
    row = {}
    for pack in (False, True):
        cfg = _config(objective, seq_len, pack, files, args.steps, args.window, args.model)
        (padding, doc_sentences), rates = _padding(cfg), _tokens_per_sec(cfg)
        median = statistics.median(rates)
        row["packed" if pack else "unpacked"] = {
            "padding_fraction": round(padding, 4),
            "tokens_per_sec": {"median": round(median), "min": round(min(rates)),
                               "max": round(max(rates)), "windows": len(rates)},
            "useful_tokens_per_sec": round(median * (1 - padding))}
        if doc_sentences is not None:
            row["doc_sentences_padding"] = round(doc_sentences, 4)
    row["useful_ratio"] = round(row["packed"]["useful_tokens_per_sec"]
                                / row["unpacked"]["useful_tokens_per_sec"], 3)
    for way in ("unpacked", "packed"):
        r = row[way]
        print(f"{objective} length {seq_len} {way:9s} padding {r['padding_fraction']:.3f}  "
              f"tokens/s {r['tokens_per_sec']['median']:,} (min {r['tokens_per_sec']['min']:,}, "
              f"max {r['tokens_per_sec']['max']:,})  useful {r['useful_tokens_per_sec']:,}",
              file=sys.stderr)
    print(f"{objective} length {seq_len}: packed / unpacked useful tokens/s = "
          f"{row['useful_ratio']}" + (f"; DOC-SENTENCES padding {row['doc_sentences_padding']}"
                                      if "doc_sentences_padding" in row else ""),
          file=sys.stderr)
    return row


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--objectives", default="bert,albert,roberta")
    parser.add_argument("--seq_lens", default="128,512")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--files", default="")
    parser.add_argument("--model", type=json.loads, default={},
                        help="smoke test: model keys over every objective's, as JSON")
    args = parser.parse_args()
    files = args.files or _default_files()
    out = {}
    for objective in args.objectives.split(","):
        if objective == "roberta" and not GPT2.exists():
            print(f"roberta skipped: no GPT-2 vocabulary at {GPT2}", file=sys.stderr)
            continue
        out[objective] = {str(n): _measure(objective, n, files, args)
                          for n in (int(x) for x in args.seq_lens.split(","))}
    print(json.dumps({"files": files, "steps": args.steps, "objectives": out}))


if __name__ == "__main__":
    main()
