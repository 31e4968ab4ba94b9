"""TFDS corpora: `tfds:NAME[@SPLIT]` in data.train_files / data.eval_files.

The default reader is `tfds.data_source`: ArrayRecord files read by random
access, without TensorFlow, which is what lets a prepare step split a split into
record ranges for its workers. `data.tfds_reader="tf"` reads TFRecord-only
datasets through `tfds.load` and tf.data instead (the `tf` extra), in order.
Nothing is ever downloaded: the dataset must already be prepared in
`data.tfds_data_dir` (a local path or gs://) or TFDS's default directory.
"""

import os

from pretrainx.errors import UserError

PREFIX = "tfds:"
READERS = ("data_source", "tf")


def parse(spec: str) -> tuple[str, str]:
    """`tfds:c4/en:3.1.0@train[:1%]` -> ("c4/en:3.1.0", "train[:1%]")."""
    body = spec.strip()[len(PREFIX):]
    name, _, split = body.partition("@")
    if not name:
        raise UserError(f"{spec!r}: expected tfds:NAME[@SPLIT], e.g. tfds:c4/en@train")
    return name, split or "train"


def _tfds():
    try:
        import tensorflow_datasets as tfds
    except ImportError:
        raise UserError("reading tfds: sources needs tensorflow-datasets "
                        "(pip install tensorflow-datasets)") from None
    return tfds


def _check_data_dir(data_dir: str) -> None:
    if not data_dir or "://" in data_dir:
        return  # TFDS's default directory, or a bucket that only TFDS can check
    if not os.path.isdir(data_dir) or not os.access(data_dir, os.R_OK | os.X_OK):
        raise UserError(f"config key 'data.tfds_data_dir' is {data_dir!r}: not a readable "
                        "directory")


def builder(spec: str, data_dir: str):
    """The dataset's builder: registered by name, or read from files in data_dir."""
    tfds = _tfds()
    name, split = parse(spec)
    _check_data_dir(data_dir)
    try:
        found = tfds.builder(name, data_dir=data_dir or None)
    except tfds.core.registered.DatasetNotFoundError:
        where = data_dir or "TFDS's default data_dir"
        raise UserError(f"{spec}: TFDS has no dataset {name!r} (not registered and not "
                        f"prepared in {where})") from None
    except Exception as e:  # noqa: BLE001 - TFDS raises many kinds for a bad name
        raise UserError(f"{spec}: cannot open TFDS dataset {name!r}: "
                        f"{' '.join(str(e).split())[:200]}") from None
    if not found.is_prepared():
        raise UserError(f"{spec}: dataset {name!r} is not prepared in {found.data_dir} (no "
                        "download happens here: prepare it where there is a network, with "
                        "file_format='array_record')")
    base_split = split.split("[")[0].split("+")[0]
    if base_split not in found.info.splits:
        raise UserError(f"{spec}: dataset {name!r} has no split {base_split!r}; it has "
                        f"{sorted(found.info.splits)}")
    return found, split


def _data_source(spec: str, data_dir: str):
    found, split = builder(spec, data_dir)
    try:
        return found.as_data_source(split=split)
    except NotImplementedError:
        raise UserError(f"{spec}: stored as {found.info.file_format.value}, which has no random "
                        "access; set data.tfds_reader='tf' (needs the tf extra) or prepare it "
                        "with file_format='array_record'") from None


def num_records(spec: str, data_dir: str, reader: str = "data_source") -> int:
    if reader not in READERS:
        raise UserError(f"config key 'data.tfds_reader' is {reader!r}; expected one of {READERS}")
    if reader == "data_source":
        return len(_data_source(spec, data_dir))
    found, split = builder(spec, data_dir)
    return found.info.splits[split].num_examples


def records(spec: str, data_dir: str, reader: str, start: int = 0, stop: int | None = None):
    """(index, record) for records [start, stop) of the split, decoded to Python values."""
    if reader == "data_source":
        source = _data_source(spec, data_dir)
        stop = len(source) if stop is None else stop
        for index in range(start, stop):
            yield index, source[index]
        return
    found, split = builder(spec, data_dir)
    try:
        import tensorflow  # noqa: F401
    except ImportError:
        raise UserError(f"{spec}: data.tfds_reader='tf' needs TensorFlow "
                        "(pip install -e '.[tf]')") from None
    ds = _tfds().as_numpy(found.as_dataset(split=split, shuffle_files=False))
    for index, record in enumerate(ds):
        if stop is not None and index >= stop:
            break
        if index >= start:
            yield index, record
