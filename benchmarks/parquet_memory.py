"""Does reading a Parquet corpus larger than memory keep memory flat? Peak RSS against
file size.

    python benchmarks/parquet_memory.py [--gigabytes=2] [--keep=PATH]

1. Write: the shared corpus (8 Gutenberg books + WikiText-2 raw) as web-page-like
   records (runs of 8 paragraphs of one file; the last record of each file is the
   rest of it), repeated until the Parquet file holds `--gigabytes` GB on disk,
   uncompressed so that the file's size is its text's, in row groups of 4,096
   records (what `pq.write_table` would pick for pages of a few KB is similar).
2. Read: a fresh process lists the file's units (`pretrainx.data.sources.list_units`)
   and reads each into documents of sentences (`unit_documents`), one unit at a time
   as `python -m pretrainx.data prepare`'s workers do, keeping only counts. Its peak
   RSS (`ru_maxrss`) is printed with the RSS after imports, the file's size and the
   largest unit's text, and the read speed in MB/s and records/s.

The bound: peak RSS - RSS after imports stays below a few units' text (a unit's
strings, its documents and pyarrow's buffers of one row group), whatever the file's
size. The last line is one JSON object.
"""

import argparse
import glob
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(REPO), "shared", "data")
CORPUS = [*sorted(glob.glob(os.path.join(SHARED, "corpus", "gutenberg", "*.txt"))),
          *sorted(glob.glob(os.path.join(SHARED, "corpus", "wikitext-2-raw", "*.raw")))]
PARAGRAPHS_A_RECORD = 8
ROW_GROUP = 4096


def records_of(path):
    with open(path, encoding="utf-8") as f:
        paragraphs = [p for p in f.read().split("\n\n") if p.strip()]
    return ["\n\n".join(paragraphs[i:i + PARAGRAPHS_A_RECORD])
            for i in range(0, len(paragraphs), PARAGRAPHS_A_RECORD)]


def write(path, gigabytes, files):
    """The corpus's records, copied until their text is `gigabytes` GB; returns rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    texts = [t for name in files for t in records_of(name)]
    per_copy = sum(len(t.encode("utf-8")) for t in texts)
    copies = max(1, math.ceil(gigabytes * 1e9 / per_copy))
    schema = pa.schema([("text", pa.string()), ("copy", pa.int32())])
    with pq.ParquetWriter(path, schema, compression="none") as writer:
        for copy in range(copies):
            for at in range(0, len(texts), ROW_GROUP):
                chunk = texts[at:at + ROW_GROUP]
                writer.write_table(pa.table({"text": chunk, "copy": [copy] * len(chunk)},
                                            schema=schema), row_group_size=ROW_GROUP)
    return copies * len(texts)


def read(path):
    """In this process: every unit one at a time; prints one JSON object."""
    sys.path.insert(0, REPO)
    from pretrainx.data import sources
    after_imports = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    start = time.perf_counter()
    units = sources.list_units(path)
    records = documents = sentences = chars = largest = 0
    for unit in units:
        stats = sources.new_stats()
        docs = sources.unit_documents(unit, stats=stats)
        size = sum(len(s) for d in docs for s in d)
        records, documents = records + stats["records"], documents + stats["documents"]
        sentences, chars, largest = sentences + stats["sentences"], chars + size, max(largest, size)
        del docs
    seconds = time.perf_counter() - start
    print(json.dumps({"units": len(units), "records": records, "documents": documents,
                      "sentences": sentences, "text_chars": chars, "largest_unit_chars": largest,
                      "seconds": seconds, "rss_after_imports": after_imports,
                      "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gigabytes", type=float, default=2.0)
    parser.add_argument("--keep", default="", help="write the file here and keep it")
    parser.add_argument("--corpus", default=",".join(CORPUS), help="comma-separated files")
    parser.add_argument("--read", default="", help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args()
    if args.read:
        read(args.read)
        return
    work = tempfile.mkdtemp(prefix="pretrainx-parquet-")
    path = args.keep or os.path.join(work, "corpus.parquet")
    try:
        started = time.perf_counter()
        rows = write(path, args.gigabytes, args.corpus.split(","))
        size = os.path.getsize(path)
        print(f"wrote {path}: {size / 1e9:.2f} GB, {rows:,} records in row groups of "
              f"{ROW_GROUP} ({time.perf_counter() - started:.0f} s)", flush=True)
        done = subprocess.run([sys.executable, __file__, f"--read={path}"], check=True,
                              capture_output=True, text=True)
        result = json.loads(done.stdout.strip().splitlines()[-1])
        grown = result["peak_rss"] - result["rss_after_imports"]
        print(f"read {result['units']} units, {result['records']:,} records, "
              f"{result['text_chars'] / 1e9:.2f} G characters of sentences in "
              f"{result['seconds']:.0f} s ({size / 1e6 / result['seconds']:.1f} MB/s, "
              f"{result['records'] / result['seconds']:,.0f} records/s); peak RSS "
              f"{result['peak_rss'] / 1e6:.0f} MB = {result['rss_after_imports'] / 1e6:.0f} MB "
              f"after imports + {grown / 1e6:.0f} MB; the file is {size / 1e6:,.0f} MB, its "
              f"largest unit {result['largest_unit_chars'] / 1e6:.1f} M characters", flush=True)
        print(json.dumps(dict(result, file_bytes=size, rows=rows, rss_growth=grown,
                              growth_over_file=grown / size)))
    finally:
        if not args.keep:
            os.remove(path) if os.path.exists(path) else None
            os.rmdir(work)


if __name__ == "__main__":
    main()
