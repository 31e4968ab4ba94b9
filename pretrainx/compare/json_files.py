"""JSON records that a rerun reads back (a probe's, a comparison's fine-tunings and
cells): written whole or not at all, so a run stopped mid-write never leaves half a
record for the next one to trust."""

import json
import os


def write(path: str, record: dict) -> dict:
    """`record` at `path`, through a temporary file renamed over it; returns `record`."""
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
    os.replace(path + ".tmp", path)
    return record


def read(path: str):
    """The record at `path`, or None when there is none yet."""
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)
