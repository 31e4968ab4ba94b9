"""Prepared datasets: an objective's examples as token ids in ArrayRecord shards.

Layout of DIR (written by `python -m pretrainx.data prepare`):

    manifest.json                          what made it (fingerprint) and what is in it
    train0/documents-00000.array_record    tokenized documents, one shard per unit
    train0/seq128/examples-00000-of-00003.array_record
    eval0/seq128/...

One record is one example (a document in documents-*), serialized with
msgpack. Shards are written with group_size 1, so grain reads any record
without decompressing its neighbours: training keeps random access, a global
shuffle and an exact resume at any corpus size.
"""

import hashlib
import json
import os
from typing import Sequence

from flax import serialization

from pretrainx import config as config_lib
from pretrainx.data import sources
from pretrainx.errors import UserError

MANIFEST = "manifest.json"
FORMAT_VERSION = 1
WRITER_OPTIONS = "group_size:1"

# data.* keys that change no example: applied at batch time, or only say where
# things are. Every other data key, the seed and the tokenizer's bytes must match.
_BATCH_TIME_KEYS = ("mask_prob", "max_predictions_per_seq", "whole_word_masking",
                    "prepared_dir", "train_weights", "mixing_alpha",
                    "train_source_names", "train_files", "eval_files",
                    "tokenizer", "tfds_data_dir", "tfds_reader", "worker_processes",
                    "geometric_p", "max_span_words")


def encode(example) -> bytes:
    return serialization.msgpack_serialize(example)


def decode(record: bytes):
    return serialization.msgpack_restore(record)


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fingerprint(cfg, tokenizer) -> dict:
    """What the prepared examples depend on, to refuse a config they do not match."""
    data = {k: v for k, v in config_lib.flatten(cfg.data).items() if k not in _BATCH_TIME_KEYS}
    return {"objective": cfg.objective, "seed": cfg.seed,
            "tokenizer_sha256": file_sha256(tokenizer.path),
            **{f"data.{k}": v for k, v in sorted(data.items())}}


def source_names(cfg) -> dict:
    """{name: spec}: train0, train1, ... for data.train_files' sources, eval0... for eval's."""
    names = {f"train{i}": s for i, s in enumerate(sources.split_sources(cfg.data.train_files))}
    if cfg.data.eval_files:
        names.update({f"eval{i}": s
                      for i, s in enumerate(sources.split_sources(cfg.data.eval_files))})
    return names


def _name_of(cfg, spec: str, train: bool) -> str:
    role = "train" if train else "eval"
    for name, known in source_names(cfg).items():
        if name.startswith(role) and known == spec.strip():
            return name
    raise UserError(f"{spec} is not one of the config's data.{role}_files sources")


def read_manifest(directory: str) -> dict:
    path = os.path.join(directory, MANIFEST)
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except FileNotFoundError:
        raise UserError(f"config key 'data.prepared_dir' is {directory!r}, which has no "
                        f"{MANIFEST}: run python -m pretrainx.data prepare first") from None
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read {path}: {e}") from None
    if manifest.get("format") != FORMAT_VERSION:
        raise UserError(f"{path}: format {manifest.get('format')!r}, this version reads "
                        f"{FORMAT_VERSION}; prepare again")
    return manifest


def check_matches(manifest: dict, cfg, tokenizer, directory: str) -> None:
    """The first key whose value differs from the one the data was prepared with."""
    made = manifest["fingerprint"]
    now = fingerprint(cfg, tokenizer)
    for key in sorted(set(made) | set(now)):
        if made.get(key) != now.get(key):
            what = ("a different tokenizer file" if key == "tokenizer_sha256"
                    else f"{key}={made.get(key)!r}; this config has {now.get(key)!r}")
            raise UserError(f"prepared data in {directory} was made with {what}: prepare "
                            "again or set it back")
    for name, spec in source_names(cfg).items():
        if name not in manifest["sources"]:
            raise UserError(f"prepared data in {directory} has no source {name} ({spec}): "
                            "prepare again with this config's data files")


class Examples(Sequence):
    """Random access to a prepared source's examples at one sequence length."""

    def __init__(self, paths: list, count: int):
        self._paths, self._count = paths, count
        try:
            self._source = _open_shards(paths)
        except Exception:  # a truncated shard fails while its index is read
            raise _damaged(paths, None) from None
        if len(self._source) != count:
            raise UserError(f"prepared shards {paths[0]}... hold {len(self._source)} records; "
                            f"the manifest says {count}: prepare again")

    def __len__(self):
        return self._count

    def __getitem__(self, index):
        if not 0 <= index < self._count:
            raise IndexError(f"example {index} of {self._count}")
        try:
            record = self._source[int(index)]
        except Exception:  # Riegeli's RuntimeError names no file: a damaged chunk
            raise _damaged(self._paths, int(index)) from None
        return decode(record)

    def __reduce__(self):  # grain worker processes reopen the files
        return Examples, (self._paths, self._count)


def _open_shards(paths: list):
    import grain
    return grain.sources.ArrayRecordDataSource(paths)


def _damaged(paths: list, index: int | None) -> UserError:
    """The shard a failed open or read (of global record `index`) came from, found by
    opening and reading the shards one at a time, as one line."""
    start = 0
    for path in paths:
        try:
            shard = _open_shards([path])
            count = len(shard)
            if index is not None and start <= index < start + count:
                shard[index - start]
        except Exception as e:
            said = str(e).strip().splitlines()
            reason = said[0][:160] if said else f"unreadable, {type(e).__name__}"
            return UserError(f"prepared shard {path} is damaged ({reason}): prepare again")
        start += count
    return UserError(f"prepared shards {paths[0]}... could not be read: prepare again")


def open_examples(cfg, tokenizer, spec: str, phase, train: bool):
    """(Examples, the source's reading stats as prepare counted them)."""
    directory = cfg.data.prepared_dir
    manifest = read_manifest(directory)
    check_matches(manifest, cfg, tokenizer, directory)
    name = _name_of(cfg, spec, train)
    entry = manifest["sources"][name]["examples"].get(str(phase.seq_len))
    if entry is None:
        raise UserError(f"prepared data in {directory} has no {name} examples at seq_len "
                        f"{phase.seq_len} (it has {sorted(manifest['sources'][name]['examples'])})")
    paths = [os.path.join(directory, p) for p in entry["shards"]]
    for path in paths:
        if not os.path.isfile(path):
            raise UserError(f"prepared shard {path} is missing: prepare again")
    source = manifest["sources"][name]
    return Examples(paths, entry["count"]), dict(source["stats"], tokens=source["tokens"])
