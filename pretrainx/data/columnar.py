"""Columnar corpora: Parquet files (local, gs:// or hf://datasets/OWNER/NAME/...) and
the Arrow folders that HF `datasets` writes with `save_to_disk`, the text in one column.

The corpora modern encoders train on (FineWeb-Edu, DCLM, Dolma, C4) ship as Parquet.
A file is read in units of whole row groups (Arrow: record batches) of about
`ROWS_PER_UNIT` rows, one unit at a time and a batch of rows at a time within it, so
memory is bounded by a unit whatever the corpus's size, and a prepare worker or a host
can take a unit on its own. Remote paths go through fsspec (huggingface_hub's
HfFileSystem for hf://, gcsfs for gs://); nothing is read before a unit asks for it.
"""

import glob
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq

from pretrainx.errors import UserError

ROWS_PER_UNIT = 10_000
# One conversion to Python strings at a time: bounded memory inside a large row group.
_BATCH_ROWS = 2048
_ARROW_STATE = "state.json"  # what datasets' save_to_disk writes beside its .arrow files
_REMOTE_PACKAGES = {"gs": "gcsfs", "gcs": "gcsfs", "hf": "huggingface_hub", "s3": "s3fs"}


def is_remote(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def is_columnar(path: str) -> bool:
    """A Parquet or Arrow file, or a folder that save_to_disk wrote."""
    return path.endswith((".parquet", ".arrow")) or is_arrow_dir(path)


def is_arrow_dir(path: str) -> bool:
    return not is_remote(path) and os.path.isfile(os.path.join(path, _ARROW_STATE))


def _offline_hint(path: str) -> str:
    if path.startswith("hf://"):
        return ("without network, download it first (hf download --repo-type dataset "
                "OWNER/NAME --local-dir DIR) and give the local files")
    return "without network, copy the files to local disk first and give the local paths"


def _filesystem(path: str):
    """(fsspec filesystem, path inside it) for a remote path, with one-line errors."""
    import fsspec
    protocol = path.split("://", 1)[0]
    try:
        return fsspec.core.url_to_fs(path)
    except ImportError:
        package = _REMOTE_PACKAGES.get(protocol, f"an fsspec filesystem for {protocol}://")
        raise UserError(f"reading {path!r} needs {package} (pip install {package})") from None
    except ValueError as e:
        raise UserError(f"cannot read {path!r}: {e}") from None


def _short(error: Exception, limit: int = 120) -> str:
    """An exception's message on one line, cut to `limit` characters."""
    return " ".join(str(error).split())[:limit]


def _remote_error(path: str, error: Exception) -> UserError:
    reason = _short(error, 160) or type(error).__name__
    return UserError(f"cannot reach {path!r} ({type(error).__name__}: {reason}); "
                     f"{_offline_hint(path)}")


def expand_remote(pattern: str) -> list:
    """A remote path or glob -> the sorted remote paths it names."""
    fs, inner = _filesystem(pattern)
    try:
        if any(c in inner for c in "*?["):
            matches = sorted(fs.glob(inner))
        else:
            fs.info(inner)  # exists() would take a network error for a missing file
            matches = [inner]
    except FileNotFoundError:
        matches = []
    except Exception as e:  # noqa: BLE001 - each filesystem raises its own network errors
        raise _remote_error(pattern, e) from None
    return [fs.unstrip_protocol(m) for m in matches]


def _open(path: str):
    """A seekable binary file of a local or remote path."""
    if not is_remote(path):
        return open(path, "rb")
    fs, inner = _filesystem(path)
    try:
        return fs.open(inner, "rb")
    except Exception as e:  # noqa: BLE001
        raise _remote_error(path, e) from None


def _parquet(handle, path: str) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(handle)
    except (pa.ArrowException, OSError) as e:
        raise UserError(f"cannot read {path!r}: not a Parquet file, or cut short "
                        f"({_short(e)})") from None


def _arrow_files(path: str) -> list:
    if path.endswith(".arrow"):
        return [path]
    files = sorted(glob.glob(os.path.join(path, "*.arrow")))
    if not files:
        raise UserError(f"{path!r} has {_ARROW_STATE} but no .arrow files")
    return files


def _arrow_reader(handle, path: str):
    """save_to_disk writes the Arrow stream format; the file format is read too."""
    try:
        return pa.ipc.open_file(handle)
    except pa.ArrowInvalid:
        handle.seek(0)
    try:
        return pa.ipc.open_stream(handle)
    except (pa.ArrowException, OSError) as e:
        raise UserError(f"cannot read {path!r}: not an Arrow file, or cut short "
                        f"({_short(e)})") from None


def _arrow_batches(reader):
    if isinstance(reader, pa.ipc.RecordBatchFileReader):
        return (reader.get_batch(i) for i in range(reader.num_record_batches))
    return iter(reader)


def _group(sizes, rows_per_unit):
    """Consecutive [start, stop) ranges of parts (row groups, batches) of ~rows_per_unit."""
    ranges, start, rows = [], 0, 0
    for i, n in enumerate(sizes):
        rows += n
        if rows >= rows_per_unit:
            ranges.append((start, i + 1))
            start, rows = i + 1, 0
    if start < len(sizes) or not ranges:
        ranges.append((start, len(sizes)))
    return ranges


def _part_sizes(path: str) -> list:
    """[(file, bytes, rows of each row group or record batch)] of a columnar path, from
    Parquet's metadata or the memory-mapped Arrow files' batch headers."""
    if path.endswith(".parquet"):
        with _open(path) as f:
            meta = _parquet(f, path).metadata
            size = f.seek(0, os.SEEK_END)
        return [(path, int(size), [meta.row_group(i).num_rows
                                   for i in range(meta.num_row_groups)])]
    out = []
    for name in _arrow_files(path):
        with pa.memory_map(name) as f:
            sizes = [b.num_rows for b in _arrow_batches(_arrow_reader(f, name))]
        out.append((name, os.path.getsize(name), sizes))
    return out


def describe(path: str) -> dict:
    """What a resume checks the file against: bytes and rows (from metadata only)."""
    parts = _part_sizes(path)
    return {"path": path, "bytes": sum(b for _, b, _ in parts),
            "rows": int(sum(sum(sizes) for _, _, sizes in parts))}


def part_ranges(path: str, rows_per_unit: int = ROWS_PER_UNIT) -> list:
    """[(kind, file, start, stop)]: the units of a columnar path, in file order."""
    kind = "parquet" if path.endswith(".parquet") else "arrow"
    return [(kind, name, a, b) for name, _, sizes in _part_sizes(path)
            for a, b in _group(sizes, rows_per_unit)]


def _text_column(schema: pa.Schema, field: str, path: str) -> None:
    if field not in schema.names:
        raise UserError(f"{path}: no column {field!r} (data.text_field); its columns are "
                        f"{', '.join(schema.names)}")
    kind = schema.field(field).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)
            or pa.types.is_string_view(kind)):
        raise UserError(f"{path}: column {field!r} (data.text_field) holds {kind}, not text")


def texts(kind: str, path: str, start: int, stop: int, field: str):
    """The `field` strings (None for a null) of parts [start, stop) of one file."""
    if kind == "parquet":
        with _open(path) as f:
            parquet = _parquet(f, path)
            _text_column(parquet.schema_arrow, field, path)
            try:
                for batch in parquet.iter_batches(_BATCH_ROWS, range(start, stop), [field]):
                    yield from batch.column(0).to_pylist()
            except (pa.ArrowException, OSError) as e:
                raise UserError(f"cannot read {path!r}: damaged in row groups {start}:{stop} "
                                f"({_short(e)})") from None
        return
    with pa.memory_map(path) as f:
        reader = _arrow_reader(f, path)
        _text_column(reader.schema, field, path)
        for i, batch in enumerate(_arrow_batches(reader)):
            if i >= stop:
                break
            if i >= start:
                yield from batch.column(field).to_pylist()


def dataset_dict_hint(path: str) -> str | None:
    """save_to_disk of a DatasetDict writes one folder a split: name the split."""
    listing = os.path.join(path, "dataset_dict.json")
    if not os.path.isfile(listing):
        return None
    with open(listing, encoding="utf-8") as f:
        splits = json.load(f).get("splits", [])
    return (f"{path!r} holds the splits {', '.join(splits)} of a DatasetDict: give one of "
            f"them, e.g. {os.path.join(path, splits[0] if splits else 'train')}")
