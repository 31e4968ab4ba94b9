"""Can one TPU host's CPUs keep its chips fed? Input pipeline throughput per core.

    python benchmarks/input_pipeline.py [--batches=N] [--workers=2] [--corpus=GLOBS]

1. Prepare: the shared corpus (8 Gutenberg books + WikiText-2 raw) is tokenized
   into ArrayRecord shards with `pretrainx.prepare.examples`, once with BERT's
   original uncased WordPiece vocab and once with our T5 SentencePiece model,
   in one process: tokenization tokens/s per core.
2. Pipeline: for BERT (MLM+NSP) at 128 and 512 and T5 (span corruption, packed,
   512) the training iterator of one host of four (process_index 0 of 4, the
   recipe's global batch) reads the prepared shards, shuffles, masks or corrupts,
   packs and batches, in the main thread: tokens (sequence positions the model
   consumes) per second of CPU time = tokens/s per core. The same pipeline
   with grain worker processes (`mp_prefetch`) gives the wall-clock speed-up.
3. Read: the same corpus read and tokenized (BERT's vocab) from its text files and
   from a Parquet file of the same text (records of 8 paragraphs, row groups of
   1,024 records, snappy, as HF's Parquet exports are), in the main thread: rows
   (text lines; Parquet records) and tokens per second of CPU time, the median of
   three reads of each. The two readers
   split the text into documents their own ways (books at headings; a record a
   document), so their tokens differ by a few percent.
4. Need: a v5e-16 slice (16 chips, 4 hosts) at 50% MFU consumes
   16 * 197 TFLOP/s * 0.5 / (training FLOPs per token) tokens/s; a quarter of
   that per host, divided by tokens/s per core, is the host cores needed.

Target: at most 8 cores per host. The last line is one JSON object.
"""

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import grain  # noqa: E402
from absl import flags  # noqa: E402

from pretrainx import config as config_lib, objectives  # noqa: E402
from pretrainx.train.chips import CHIPS  # noqa: E402
from pretrainx.prepare import examples as prepare  # noqa: E402
from pretrainx.data import corpus as corpus_lib, pipeline, sources  # noqa: E402
from pretrainx.data.tokenizers import load_tokenizer  # noqa: E402

SHARED = os.path.join(os.path.dirname(REPO), "shared", "data")
CORPUS = ",".join([os.path.join(SHARED, "corpus", "gutenberg", "*.txt"),
                   os.path.join(SHARED, "corpus", "wikitext-2-raw", "*.raw")])
BERT_VOCAB = os.path.join(SHARED, "tokenizers", "bert-base-uncased", "vocab.txt")
T5_SPM = os.path.join(REPO, "pretrainx", "assets", "spm_t5_4k.model")
HOSTS, CHIPS_PER_SLICE, MFU, CHIP = 4, 16, 0.5, "v5e"
TARGET_CORES = 8
WINDOWS = 3  # reads of each kind; the median is reported, min and max beside it


def bert_config(corpus=CORPUS):
    sys.path.insert(0, os.path.join(REPO, "configs"))
    import bert_base
    cfg = bert_base.get_config()
    cfg.data.train_files, cfg.data.tokenizer = corpus, BERT_VOCAB
    return cfg


def t5_config(corpus=CORPUS):
    sys.path.insert(0, os.path.join(REPO, "configs"))
    import t5_base
    cfg = t5_base.get_config()
    cfg.data.train_files, cfg.data.tokenizer = corpus, T5_SPM
    return cfg


def prepare_timed(cfg, out):
    shutil.rmtree(out, ignore_errors=True)
    cpu = time.process_time()
    manifest = prepare.prepare(cfg, out, workers=1)
    timing = manifest["timing"]
    return {"tokens": timing["tokens"], "tokenize_sec": timing["tokenize_sec"],
            "tokenize_tokens_per_sec_per_core": timing["tokens_per_sec"],
            "prepare_total_sec": timing["total_sec"], "prepare_cpu_sec": time.process_time() - cpu}


def host_dataset(cfg, phase):
    tokenizer = load_tokenizer(cfg.data.tokenizer, lower_case=cfg.data.lower_case)
    objective = objectives.build(cfg, tokenizer)
    examples = objective.examples(cfg.data.train_files, phase, train=True)
    ds = pipeline.make_dataset(examples, objective.transform(phase, train=True),
                               phase.global_batch_size, seed=0, process_index=0,
                               process_count=HOSTS)
    return ds, objective


def tokens_of(batch, objective):
    return sum(v.size for k, v in batch.items() if k in objective.token_features)


def per_core(ds, objective, batches):
    """Main thread only: tokens per CPU second."""
    it = iter(ds.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)))
    next(it)  # opens the shards
    tokens, cpu, wall = 0, time.process_time(), time.perf_counter()
    for _ in range(batches):
        tokens += tokens_of(next(it), objective)
    return tokens / (time.process_time() - cpu), tokens / (time.perf_counter() - wall)


def with_workers(ds, objective, batches, workers):
    """Wall-clock tokens/s with grain worker processes doing the transforms."""
    iter_ds = ds.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))
    it = iter(iter_ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers)))
    next(it)
    tokens, wall = 0, time.perf_counter()
    for _ in range(batches):
        tokens += tokens_of(next(it), objective)
    rate = tokens / (time.perf_counter() - wall)
    del it
    return rate


def parquet_copy(globs, path):
    """The corpus as one Parquet file: records of 8 paragraphs of one file. Returns lines."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    texts, lines = [], 0
    for name in sources.expand_patterns(globs):
        with open(name, encoding="utf-8") as f:
            text = f.read()
        lines += text.count("\n")
        paragraphs = [p for p in text.split("\n\n") if p.strip()]
        texts += ["\n\n".join(paragraphs[i:i + 8]) for i in range(0, len(paragraphs), 8)]
    pq.write_table(pa.table({"text": texts}), path, row_group_size=1024)
    return lines


def read_rates(cfg, work):
    """{reader: rows/s, tokens/s per core}: text files against the same text as Parquet."""
    tokenizer = load_tokenizer(cfg.data.tokenizer, lower_case=cfg.data.lower_case)
    parquet = os.path.join(work, "corpus.parquet")
    lines = parquet_copy(cfg.data.train_files, parquet)
    out = {}
    for reader, spec in (("text", cfg.data.train_files), ("parquet", parquet)):
        times = []
        for _ in range(WINDOWS):  # the two readers alternate in no window: each alone
            cpu = time.process_time()
            docs, stats = sources.read_documents(spec)
            tokens = sum(s.size for d in corpus_lib.tokenize(docs, tokenizer) for s in d)
            times.append(time.process_time() - cpu)
        seconds = statistics.median(times)
        rows = lines if reader == "text" else stats["records"]
        out[reader] = {"rows": rows, "tokens": int(tokens), "cpu_sec": round(seconds, 2),
                       "cpu_sec_min_max": [round(min(times), 2), round(max(times), 2)],
                       "rows_per_sec_per_core": round(rows / seconds),
                       "tokens_per_sec_per_core": round(tokens / seconds)}
    out["parquet_over_text_tokens_per_sec"] = round(
        out["parquet"]["tokens_per_sec_per_core"] / out["text"]["tokens_per_sec_per_core"], 2)
    return out


def needed_per_host(objective, phase):
    flops = objective.flops_per_token(phase)
    slice_tokens = CHIPS_PER_SLICE * CHIPS[CHIP].peak_flops * MFU / flops
    return slice_tokens / HOSTS, flops


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--corpus", default=CORPUS, help="comma-separated globs (the smoke "
                        "test's: two bundled books)")
    args = parser.parse_args()
    flags.FLAGS(sys.argv[:1])  # grain's worker processes read absl flags
    work = tempfile.mkdtemp(prefix="pretrainx-input-")
    results, prep = {}, {}
    try:
        for family, make in (("bert", bert_config), ("t5", t5_config)):
            cfg = make(args.corpus)
            out = os.path.join(work, family)
            prep[family] = prepare_timed(cfg, out)
            p = prep[family]
            print(f"prepare {family}: {p['tokens']:,} tokens tokenized in {p['tokenize_sec']:.1f} s "
                  f"on one core = {p['tokenize_tokens_per_sec_per_core']:,.0f} tokens/s; whole "
                  f"prepare (examples too) {p['prepare_total_sec']:.1f} s", flush=True)
            cfg.data.prepared_dir = out
            for phase in config_lib.phases(cfg):
                name = f"{family}_{phase.seq_len}"
                ds, objective = host_dataset(cfg, phase)
                rate, wall = per_core(ds, objective, args.batches)
                mp_rate = with_workers(ds, objective, args.batches, args.workers)
                need, flops = needed_per_host(objective, phase)
                cores = math.ceil(need / rate)
                results[name] = {
                    "local_batch": phase.global_batch_size // HOSTS, "seq_len": phase.seq_len,
                    "tokens_per_sec_per_core": round(rate),
                    "tokens_per_sec_main_thread_wall": round(wall),
                    f"tokens_per_sec_{args.workers}_workers": round(mp_rate),
                    "worker_speedup": round(mp_rate / wall, 2),
                    "train_flops_per_token": flops, "needed_tokens_per_sec_per_host": round(need),
                    "cores_needed_per_host": cores, "meets_target": cores <= TARGET_CORES}
                print(f"{name}: {rate:,.0f} tokens/s per core; {args.workers} grain workers "
                      f"{mp_rate:,.0f} tokens/s wall ({mp_rate / wall:.2f}x the main thread). Need: "
                      f"{CHIPS_PER_SLICE} x {CHIPS[CHIP].peak_flops / 1e12:.0f} TFLOP/s x {MFU} / "
                      f"{flops / 1e9:.3f} GFLOP/token / {HOSTS} hosts = {need:,.0f} tokens/s per "
                      f"host -> {need:,.0f} / {rate:,.0f} = {need / rate:.2f} -> {cores} cores "
                      f"(target <= {TARGET_CORES})", flush=True)
        reading = read_rates(bert_config(args.corpus), work)
        for reader in ("text", "parquet"):
            r = reading[reader]
            print(f"read {reader}: {r['rows']:,} rows, {r['tokens']:,} tokens in {r['cpu_sec']} "
                  f"CPU s (median of {WINDOWS}; min, max {r['cpu_sec_min_max']}) = "
                  f"{r['rows_per_sec_per_core']:,} rows/s, "
                  f"{r['tokens_per_sec_per_core']:,} tokens/s per core", flush=True)
        print(f"read parquet / text, tokens/s per core: "
              f"{reading['parquet_over_text_tokens_per_sec']}x", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({"cases": results, "prepare": prep, "read": reading,
                      "target_cores_per_host": TARGET_CORES}))


if __name__ == "__main__":
    main()
