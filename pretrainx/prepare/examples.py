"""Tokenize a config's corpora once into ArrayRecord shards of examples (it builds
the objective's examples, so it sits above the data package; data/prepared.py reads
the shards back).

    python -m pretrainx.data prepare --config=configs/NAME.py --output=DIR [--workers=N]

Two stages, each spread over worker processes:

1. every unit of every source (a file, or a range of a TFDS split's records) is
   read and tokenized into one shard of documents;
2. documents are cut into groups of `data.docs_per_shard` and every group
   becomes one shard of examples per sequence length the config trains at.

Every shard is a pure function of its inputs and the config, so the output is
the same byte for byte whatever the number of workers, and equal to the
examples that reading the text at training time builds. Training then sets
`data.prepared_dir=DIR` and reads token ids only.
"""

import concurrent.futures
import json
import multiprocessing
import os
import sys
import time

import ml_collections
import tqdm

from pretrainx import config as config_lib
from pretrainx import objectives
from pretrainx.data import corpus, prepared, sources
from pretrainx.data.tokenizers import load_tokenizer
from pretrainx.errors import UserError

_WORKER = {}


def _init_worker(cfg_dict):
    cfg = ml_collections.ConfigDict(cfg_dict)
    tokenizer = load_tokenizer(cfg.data.tokenizer, lower_case=cfg.data.lower_case)
    objective = objectives.build(cfg, tokenizer)
    # The objective's view of the vocabulary (RoBERTa lays GPT-2's ids out its own way).
    _WORKER.update(cfg=cfg, tokenizer=objective.tokenizer, objective=objective)


def _write(path, records) -> int:
    from array_record.python.array_record_module import ArrayRecordWriter

    os.makedirs(os.path.dirname(path), exist_ok=True)
    writer = ArrayRecordWriter(path + ".tmp", prepared.WRITER_OPTIONS)
    count = 0
    for record in records:
        writer.write(prepared.encode(record))
        count += 1
    writer.close()
    os.replace(path + ".tmp", path)
    return count


def _tokenize_unit(job):
    """Stage 1: one unit -> documents shard. Returns (docs, tokens, stats)."""
    unit, path = job
    cfg, tokenizer = _WORKER["cfg"], _WORKER["tokenizer"]
    stats = sources.new_stats()
    docs = sources.unit_documents(unit, **corpus.read_options(cfg.data), stats=stats)
    tokenized = corpus.tokenize(docs, tokenizer)
    _write(path, tokenized)
    tokens = sum(int(s.size) for d in tokenized for s in d)
    return len(tokenized), tokens, stats


def _build_group(job):
    """Stage 2: documents [start, stop) -> one examples shard per sequence length."""
    doc_paths, start, stop, group, train, outputs = job
    import grain

    cfg, objective = _WORKER["cfg"], _WORKER["objective"]
    documents = grain.sources.ArrayRecordDataSource(doc_paths)
    docs = [prepared.decode(documents[i]) for i in range(start, stop)]
    counts = []
    for phase, path in outputs:
        counts.append(_write(path, objective.examples_from_documents(docs, phase, train, group)))
    return counts


def _run(pool, fn, jobs, desc):
    results = map(fn, jobs) if pool is None else pool.map(fn, jobs)
    return list(tqdm.tqdm(results, total=len(jobs), desc=desc, unit="shard", file=sys.stderr,
                          mininterval=2.0))


def prepare(cfg, output: str, workers: int = 0) -> dict:
    """Writes DIR and returns its manifest. workers=0: one a CPU core."""
    objectives.validate(cfg)
    config_lib.require_data(cfg)
    if cfg.data.prepared_dir:
        raise UserError("config key 'data.prepared_dir' is set: prepare reads the text sources")
    tokenizer = load_tokenizer(cfg.data.tokenizer, lower_case=cfg.data.lower_case)
    objectives.build(cfg, tokenizer)  # the objective's own checks, before any work
    phases = config_lib.phases(cfg)
    names = prepared.source_names(cfg)
    read = corpus.read_options(cfg.data)
    units = {name: sources.list_units(spec, read["tfds_data_dir"], read["tfds_reader"])
             for name, spec in names.items()}
    if os.path.isdir(output) and os.listdir(output):
        raise UserError(f"--output={output} is not empty; give a new or empty directory (an "
                        "older preparation is never overwritten)")
    os.makedirs(output, exist_ok=True)

    workers = workers or os.cpu_count() or 1
    cfg_dict = cfg.to_dict()
    pool = None
    if workers > 1:
        pool = concurrent.futures.ProcessPoolExecutor(
            workers, mp_context=multiprocessing.get_context("spawn"),
            initializer=_init_worker, initargs=(cfg_dict,))
    else:
        _init_worker(cfg_dict)
    started = time.perf_counter()
    try:
        jobs = [(unit, os.path.join(output, name, f"documents-{u:05d}.array_record"))
                for name in names for u, unit in enumerate(units[name])]
        tokenized = _run(pool, _tokenize_unit, jobs, "tokenize")
        tokenize_sec = time.perf_counter() - started
        manifest_sources, group_jobs, at = {}, [], 0
        for name, spec in names.items():
            mine = tokenized[at:at + len(units[name])]
            doc_jobs = jobs[at:at + len(units[name])]
            at += len(units[name])
            stats = sources.new_stats()
            for _, _, unit_stats in mine:
                sources.add_stats(stats, unit_stats)
            corpus.report(stats, spec)
            num_docs = sum(d for d, _, _ in mine)
            if not num_docs:
                raise UserError(f"no text in {spec}")
            groups = corpus.group_bounds(num_docs, cfg.data.docs_per_shard)
            doc_paths = [p for _, p in doc_jobs]
            train = name.startswith("train")
            examples = {}
            for phase in phases:
                rel = [os.path.join(name, f"seq{phase.seq_len}",
                                    f"examples-{g:05d}-of-{len(groups):05d}.array_record")
                       for g in range(len(groups))]
                examples[str(phase.seq_len)] = {"shards": rel, "count": 0}
            for g, (a, b) in enumerate(groups):
                outs = [(phase, os.path.join(output, examples[str(phase.seq_len)]["shards"][g]))
                        for phase in phases]
                group_jobs.append((name, (doc_paths, a, b, g, train, outs)))
            manifest_sources[name] = {
                "spec": spec, "documents": num_docs, "tokens": sum(t for _, t, _ in mine),
                "document_shards": [os.path.relpath(p, output) for p in doc_paths],
                "stats": stats, "examples": examples}
        counts = _run(pool, _build_group, [job for _, job in group_jobs], "examples")
        for (name, job), per_phase in zip(group_jobs, counts):
            for (phase, _), n in zip(job[5], per_phase):
                manifest_sources[name]["examples"][str(phase.seq_len)]["count"] += n
    finally:
        if pool is not None:
            pool.shutdown()
    total_tokens = sum(s["tokens"] for s in manifest_sources.values())
    manifest = {
        "format": prepared.FORMAT_VERSION,
        "fingerprint": prepared.fingerprint(cfg, tokenizer),
        "sources": manifest_sources,
        # Timings vary run to run; they are kept out of the manifest so that
        # preparing twice gives identical files, and returned instead.
    }
    with open(os.path.join(output, prepared.MANIFEST), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    elapsed = time.perf_counter() - started
    return dict(manifest, timing={"tokens": total_tokens, "tokenize_sec": tokenize_sec,
                                  "total_sec": elapsed, "workers": workers,
                                  "tokens_per_sec": total_tokens / max(tokenize_sec, 1e-9)})
