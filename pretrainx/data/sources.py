"""Corpora into documents: local files and globs (text, .gz, JSONL), Parquet and Arrow
(data/columnar.py), TFDS datasets and prepared shards, listed as units, read with counted
damage, and mixed by weight. How plain text becomes sentences and documents is
data/text.py's."""

import glob
import json
import os
import re
import sys
import zlib

from pretrainx.data import columnar, tfds_source
from pretrainx.data import text as text_lib
from pretrainx.data.formats import TEXT_FORMATS
from pretrainx.errors import UserError

_REPLACEMENT = "\ufffd"
_GLOB_CHARS = re.compile(r"[*?\[]")


def is_tfds(spec) -> bool:
    """Whether a source spec names a TFDS dataset (`tfds:NAME[@SPLIT]`), not files."""
    return isinstance(spec, str) and spec.strip().startswith(tfds_source.PREFIX)


def expand_patterns(patterns):
    """Comma-separated string or list of globs -> sorted, de-duplicated files."""
    if isinstance(patterns, str):
        patterns = patterns.split(",")
    patterns = [p.strip() for p in patterns if p and p.strip()]
    if not patterns:
        raise UserError("no input files given")
    files = []
    for pattern in patterns:
        pattern = os.path.expanduser(pattern)
        if columnar.is_remote(pattern):
            matches = columnar.expand_remote(pattern)
            if not matches:
                raise UserError(f"no file matches {pattern!r}")
            for path in matches:
                if not columnar.is_columnar(path):
                    raise UserError(f"{path!r}: only Parquet and Arrow files are read from "
                                    "remote paths; copy text files to local disk")
                if path not in files:
                    files.append(path)
            continue
        if _GLOB_CHARS.search(pattern):
            matches = sorted(glob.glob(pattern))
        else:
            matches = [pattern] if os.path.exists(pattern) else []
        if not matches:
            raise UserError(f"no file matches {pattern!r}")
        for path in matches:
            if os.path.isdir(path) and not columnar.is_arrow_dir(path):
                raise UserError(columnar.dataset_dict_hint(path) or f"{path!r} is a directory, "
                                "expected text, Parquet or Arrow files or a save_to_disk folder")
            if path not in files:
                files.append(path)
    return files


def decode_text(raw):
    """Bytes -> (text, replaced_chars): lossy UTF-8, no BOM, LF line ends.

    Replaced characters are counted so that a corpus in the wrong encoding
    shows up in the stats instead of silently turning into U+FFFD soup.
    """
    text = raw.decode("utf-8", errors="replace")
    replaced = text.count(_REPLACEMENT) - raw.count(_REPLACEMENT.encode("utf-8"))
    if text.startswith("\ufeff"):
        text = text[1:]
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text, replaced


def _gunzip(data):
    """(bytes, error): every byte that decompresses, and why the rest did not."""
    out = []
    while data:
        stream = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            out.append(stream.decompress(data))
        except zlib.error as e:
            return b"".join(out), str(e)
        if not stream.eof:
            out.append(stream.flush())
            return b"".join(out), "compressed data ends before the end-of-stream marker"
        data = stream.unused_data.lstrip(b"\0")  # the next member of a concatenated file
    return b"".join(out), None


def _read_bytes(path, allow_truncated=False):
    """(bytes, truncated). A gzip file cut short keeps what was read when allowed."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise UserError(f"cannot read {path!r}: {e}") from None
    if not path.endswith(".gz"):
        return data, False
    if not data.startswith(b"\x1f\x8b"):
        raise UserError(f"cannot read {path!r}: not a gzip file")
    text, error = _gunzip(data)
    if error is None:
        return text, False
    if not allow_truncated or not text:
        raise UserError(f"cannot read {path!r}: gzip stream broken after {len(text)} bytes "
                        f"({error}); set data.skip_bad_lines=True to keep the part before")
    return text, True


class Unit:
    """A piece of a source that one worker reads on its own: a file, a range of a TFDS
    split's records, or a range of a Parquet file's row groups (an Arrow file's record
    batches). Units are listed in a fixed order, so documents are too."""

    def __init__(self, kind, path, start=0, stop=None):
        self.kind, self.path, self.start, self.stop = kind, path, start, stop

    def __repr__(self):
        if self.kind == "tfds":
            return f"{self.path}[{self.start}:{self.stop}]"
        if self.kind in ("parquet", "arrow"):
            parts = "row groups" if self.kind == "parquet" else "batches"
            return f"{self.path}[{parts} {self.start}:{self.stop}]"
        return self.path


def _is_jsonl(path):
    name = path[:-3] if path.endswith(".gz") else path
    return name.endswith((".jsonl", ".json"))


def new_stats():
    """Counters of what reading a source met (see read_documents)."""
    return {"files": 0, "records": 0, "replaced_chars": 0, "skipped_lines": 0,
            "truncated_files": 0, "documents": 0, "sentences": 0}


def add_stats(total, more):
    for key, value in more.items():
        total[key] += value
    return total


def _file_documents(path, fmt, text_field, skip_bad_lines, stats):
    raw, truncated = _read_bytes(path, allow_truncated=skip_bad_lines)
    if truncated:
        stats["truncated_files"] += 1
        print(f"warning: {path}: gzip stream truncated; kept the {len(raw)} bytes before the break",
              file=sys.stderr, flush=True)
    if b"\x00" in raw[:1 << 16]:
        raise UserError(f"{path!r} looks binary (NUL bytes), not text")
    text, replaced = decode_text(raw)
    stats["files"] += 1
    stats["replaced_chars"] += replaced
    if _is_jsonl(path):
        return _jsonl_documents(path, text, text_field, skip_bad_lines, stats,
                                last_line_cut=truncated)
    if fmt == "auto":
        name = path[:-3] if path.endswith(".gz") else path
        fmt = next((f for f, spec in TEXT_FORMATS.items()
                    if spec.suffixes and name.endswith(spec.suffixes)), "auto")
    return TEXT_FORMATS[fmt].read(path, text, text_field, skip_bad_lines, stats)


def _jsonl_documents(path, text, field, skip_bad_lines, stats, last_line_cut=False):
    documents = []
    lines = text.split("\n")
    if last_line_cut and lines:
        lines.pop()  # the line the break cut through
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            value = record[field]
            if not isinstance(value, str):
                raise TypeError(f"field {field!r} is {type(value).__name__}, not a string")
        except (ValueError, KeyError, TypeError) as e:
            if isinstance(e, KeyError):
                why = f"no field {field!r} (data.text_field)"
            elif isinstance(e, ValueError):
                why = f"not JSON ({e})"
            else:
                why = str(e)
            if not skip_bad_lines:
                raise UserError(f"{path}:{lineno}: {why}; set data.skip_bad_lines=True "
                                "to skip and count such lines") from None
            stats["skipped_lines"] += 1
            continue
        stats["records"] += 1
        documents.extend(text_lib.record_document(value))
    return documents


def _columnar_documents(unit, text_field, skip_bad_lines, stats):
    documents = []
    stats["files"] += int(unit.start == 0)
    for row, value in enumerate(columnar.texts(unit.kind, unit.path, unit.start, unit.stop,
                                               text_field)):
        if value is None:
            if not skip_bad_lines:
                raise UserError(f"{unit!r} row {row}: column {text_field!r} is null; set "
                                "data.skip_bad_lines=True to skip and count such rows")
            stats["skipped_lines"] += 1
            continue
        stats["records"] += 1
        documents.extend(text_lib.record_document(value))
    return documents


def _tfds_documents(unit, data_dir, text_field, reader, skip_bad_lines, stats):
    documents = []
    for index, record in tfds_source.records(unit.path, data_dir, reader, unit.start, unit.stop):
        split = record.get("sentences") if isinstance(record, dict) else None
        if split is not None and len(split):  # pretrainx_text keeps its files' sentence split
            stats["records"] += 1
            documents.append([s.decode("utf-8", errors="replace") if isinstance(s, bytes) else s
                              for s in split])
            continue
        value = record.get(text_field) if isinstance(record, dict) else None
        if isinstance(value, bytes):
            value = value.decode("utf-8", errors="replace")
        if not isinstance(value, str):
            if not skip_bad_lines:
                raise UserError(f"{unit.path} record {index}: no text field {text_field!r} "
                                f"(data.text_field); it has {sorted(record)}")
            stats["skipped_lines"] += 1
            continue
        stats["records"] += 1
        documents.extend(text_lib.record_document(value))
    return documents


def list_units(spec, tfds_data_dir="", tfds_reader="data_source", records_per_unit=10_000):
    """The units of one source: `tfds:NAME[@SPLIT]`, or comma-separated globs."""
    if is_tfds(spec):
        name = spec.strip()
        count = tfds_source.num_records(name, tfds_data_dir, tfds_reader)
        if tfds_reader != "data_source":
            return [Unit("tfds", name, 0, count)]  # a tf.data stream reads in order
        return [Unit("tfds", name, start, min(start + records_per_unit, count))
                for start in range(0, max(count, 1), records_per_unit)]
    units = []
    for path in expand_patterns(spec):
        if columnar.is_columnar(path):
            units.extend(Unit(*part) for part in columnar.part_ranges(path, records_per_unit))
        else:
            units.append(Unit("file", path))
    return units


def fingerprint(spec) -> list:
    """Bytes and rows of a source's Parquet and Arrow files (a resume refuses a changed
    one); [] for text and TFDS sources, whose examples' count stands for them."""
    if is_tfds(spec):
        return []
    return [columnar.describe(path) for path in expand_patterns(spec)
            if columnar.is_columnar(path)]


def unit_documents(unit, fmt="auto", text_field="text", skip_bad_lines=False,
                   tfds_data_dir="", tfds_reader="data_source", stats=None):
    """Documents (lists of sentence strings) of one unit; `stats` is added to."""
    stats = new_stats() if stats is None else stats
    if unit.kind in ("parquet", "arrow"):
        docs = _columnar_documents(unit, text_field, skip_bad_lines, stats)
    elif unit.kind == "tfds":
        docs = _tfds_documents(unit, tfds_data_dir, text_field, tfds_reader, skip_bad_lines, stats)
    else:
        docs = _file_documents(unit.path, fmt, text_field, skip_bad_lines, stats)
    stats["documents"] += len(docs)
    stats["sentences"] += sum(len(d) for d in docs)
    return docs


def read_documents(patterns, fmt="auto", *, text_field="text", skip_bad_lines=False,
                   tfds_data_dir="", tfds_reader="data_source"):
    """Read one source into (documents, stats).

    `patterns` is comma-separated globs (or a list) of plain text, .gz, or JSONL
    (.jsonl / .json, optionally .gz, one JSON object a line with the text in
    `text_field`) files, Parquet / Arrow files or save_to_disk folders (the text in
    column `text_field`, also on gs:// and hf://; a record is a document), or
    `tfds:NAME[@SPLIT]`. Each text file ends a document. `fmt` is "sentences", "text"
    or "auto" (decided per text file by `detect_format`; a .tsv file is read as
    "tsv"), or a labelled task's file: "tsv" (the `text_field` columns
    of each row) or "conll" (CoNLL-2003's sentences); see data/task_text.py.
    Stats count files, records, replaced (undecodable) characters, skipped bad
    lines, truncated files, documents and sentences.
    """
    if fmt not in TEXT_FORMATS:
        raise UserError(f"unknown corpus format {fmt!r}; expected one of "
                        f"{', '.join(TEXT_FORMATS)}")
    units = list_units(patterns, tfds_data_dir, tfds_reader)
    stats = new_stats()
    documents = []
    for unit in units:
        documents.extend(unit_documents(unit, fmt, text_field, skip_bad_lines, tfds_data_dir,
                                        tfds_reader, stats))
    if not documents:
        raise UserError(f"no text in {', '.join(map(str, units))}")
    return documents, stats


def split_sources(spec):
    """`data.train_files` -> its sources: ';' separates sources mixed by weight."""
    parts = [p.strip() for p in spec.split(";")] if isinstance(spec, str) else [spec]
    parts = [p for p in parts if p]
    if not parts:
        raise UserError("no input files given")
    return parts


def temperature_weights(sizes, alpha):
    """Sampling probabilities q_i = n_i^alpha / sum_j n_j^alpha (Lample and Conneau 2019;
    XLM-R's alpha 0.3, mBERT's about 0.7): alpha 1 keeps the sizes' proportions, smaller
    alphas lift small sources, 0 would make them equal."""
    if not all(n > 0 for n in sizes):
        raise ValueError(f"source sizes must be positive, got {sizes}")
    powered = [float(n) ** alpha for n in sizes]
    total = sum(powered)
    return [p / total for p in powered]


def source_weights(spec, weights, alpha=0.0, sizes=None):
    """Normalised mixing weights of the sources in `spec`: `weights` when given, else
    temperature sampling over `sizes` when alpha > 0, else equal."""
    count = len(split_sources(spec))
    if not weights:
        if alpha and count > 1:
            if sizes is None or len(sizes) != count:
                raise ValueError(f"temperature sampling needs {count} source sizes, got {sizes}")
            return temperature_weights(sizes, alpha)
        return [1.0 / count] * count
    try:
        values = [float(w) for w in str(weights).split(",")]
    except ValueError:
        raise UserError(f"config key 'data.train_weights' is {weights!r}; expected "
                        "comma-separated numbers") from None
    if len(values) != count:
        raise UserError(f"config key 'data.train_weights' has {len(values)} weights for "
                        f"{count} sources in data.train_files (sources are separated by ';')")
    if any(not v > 0 for v in values):
        raise UserError(f"config key 'data.train_weights' is {weights!r}; weights must be > 0")
    total = sum(values)
    return [v / total for v in values]


def _derived_name(spec):
    if spec.startswith("tfds:"):
        return spec[len("tfds:"):]
    first = os.path.basename(spec.split(",")[0].strip().rstrip("/"))
    for ext in (".gz", ".txt", ".jsonl", ".json", ".parquet", ".arrow"):
        first = first[: -len(ext)] if first.endswith(ext) else first
    return first or spec


def source_names(spec, names="", key="data.train_source_names"):
    """A name for each source of `spec` (metrics and --stats are keyed by it): `names`
    (comma-separated, one a source) when given, else each source's first file stem."""
    specs = split_sources(spec)
    if not names:
        derived = [_derived_name(s) for s in specs]
        if len(set(derived)) < len(derived):  # two sources with one stem: number them
            derived = [f"{i}:{d}" for i, d in enumerate(derived)]
        return derived
    given = [n.strip() for n in str(names).split(",")]
    if len(given) != len(specs) or not all(given) or len(set(given)) != len(given):
        raise UserError(f"config key '{key}' is {names!r}; expected {len(specs)} distinct "
                        "comma-separated names, one for each ';'-separated source")
    return given
