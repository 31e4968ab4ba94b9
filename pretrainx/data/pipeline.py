"""grain pipeline: examples -> shuffled epochs -> per-example transform -> this
process's rows of each global batch -> batches of numpy arrays.

Everything is random access (grain MapDataset), so the iterator state is just a
position: a restored run sees exactly the batches it would have seen. The
transform's RNG is keyed by the global row index, and each process takes a
contiguous block of every global batch, so the global batch is the same whatever
the number of processes.
"""

import json
import os
import threading
import time
from typing import Callable, Sequence

import grain
import jax
import numpy as np

from pretrainx.errors import UserError


class _ProcessRows(grain.MapDataset):
    """Row j of process p is global row (j // local) * global + p * local + j % local."""

    def __init__(self, parent, global_batch: int, process_index: int, process_count: int):
        super().__init__(parent)
        self._global = global_batch
        self._local = global_batch // process_count
        self._offset = process_index * self._local

    def __len__(self):
        return len(self._parent) // self._global * self._local

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.slice(index)
        batch, row = divmod(index, self._local)
        return self._parent[batch * self._global + self._offset + row]

    def __str__(self):
        return f"ProcessRows(local={self._local}, offset={self._offset})"


def make_dataset(examples: Sequence, transform: Callable, global_batch: int, seed: int, *,
                 weights: Sequence[float] | None = None, shuffle: bool = True,
                 process_index: int | None = None,
                 process_count: int | None = None) -> grain.MapDataset:
    """Infinite dataset of this process's batches (dicts of stacked numpy arrays).

    With `weights`, `examples` is a list of sources: each is shuffled and repeated
    on its own, then grain mixes them in those proportions (a small source is
    seen more epochs, a large one fewer, as T5's mixtures do). A `transform` marked
    `indexed` is called as transform(row, rng, index), the row's place in the stream of
    global batches (MDLM's rates are drawn per batch position).
    """
    process_index = jax.process_index() if process_index is None else process_index
    process_count = jax.process_count() if process_count is None else process_count
    if global_batch % process_count:
        raise ValueError(f"global batch {global_batch} does not divide over "
                         f"{process_count} processes")
    if weights is None:
        ds = _epochs(examples, seed, shuffle)
    else:
        if len(weights) != len(examples):
            raise ValueError(f"{len(weights)} weights for {len(examples)} sources")
        parts = [_epochs(source, seed + 7919 * i, shuffle) for i, source in enumerate(examples)]
        ds = grain.MapDataset.mix(parts, weights) if len(parts) > 1 else parts[0]
    if getattr(transform, "indexed", False):  # (row, rng, its index in the row stream)
        ds = ds.map_with_index(lambda i, row: transform(
            row, np.random.default_rng([seed + 1, i]), i))
    else:
        ds = ds.random_map(transform, seed=seed + 1)  # fresh masks every epoch
    ds = _ProcessRows(ds, global_batch, process_index, process_count)
    return ds.batch(global_batch // process_count, drop_remainder=True)


def row_sources(weights: Sequence[float], rows: int) -> np.ndarray:
    """The source index of each of the first `rows` rows of a `make_dataset` mix with
    these weights: grain picks a row's source from the weights alone (every source
    repeats forever), so a mix of one-element sources replays the choice exactly."""
    if len(weights) == 1:
        return np.zeros(rows, np.int64)
    tags = [grain.MapDataset.source([i]).repeat(None) for i in range(len(weights))]
    mixed = grain.MapDataset.mix(tags, weights)
    return np.asarray([mixed[i] for i in range(rows)], np.int64)


def _epochs(examples, seed, shuffle):
    ds = examples if isinstance(examples, grain.MapDataset) else grain.MapDataset.source(examples)
    if shuffle:
        ds = ds.shuffle(seed=seed)
    return ds.repeat(None)  # a fresh permutation every epoch


class DataIterator:
    """grain's iterator and what its position is a position in.

    The state is one position for every process (each process derives its own
    rows from it, so a checkpoint restores on any number of processes) plus a
    signature of the data: examples per source and mixing weights. A position
    restored into other data would replay or skip examples, so it is refused, unless
    it is the start (a checkpoint at a phase boundary, before the next phase's data
    is read: mmBERT's decay mixes branch from there), where nothing can be.
    """

    def __init__(self, iterator, signature=None):
        self._it = iterator
        self.signature = None if signature is None else json.loads(json.dumps(signature))

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._it)

    def get_state(self) -> dict:
        return {"position": self._it.get_state(), "data": self.signature}

    def set_state(self, state: dict) -> None:
        if "position" not in state:  # a bare grain state
            self._it.set_state(state)
            return
        saved = state.get("data")
        if saved != self.signature and state["position"] == self._it.get_state():
            return  # the start of other data: the fresh iterator is that position
        if saved is not None and self.signature is not None and saved != self.signature:
            changed = "; ".join(_difference(k, saved.get(k), self.signature.get(k))
                                for k in sorted(set(saved) | set(self.signature))
                                if saved.get(k) != self.signature.get(k))
            raise UserError(f"the checkpoint's data position belongs to other data ({changed}): "
                            "resuming would replay or skip examples; restore the data it was "
                            "saved with, or train in a new workdir")
        self._it.set_state(state["position"])


def _difference(key, then, now) -> str:
    """One changed signature entry; for files, the first file whose bytes or rows differ."""
    if key == "files" and then and now:
        flat_then = {f["path"]: f for source in then for f in source}
        for source in now:
            for f in source:
                old = flat_then.get(f["path"])
                if old != f:
                    was = f"{old['bytes']} bytes, {old['rows']} rows" if old else "absent"
                    return (f"{f['path']} had {was} then, {f['bytes']} bytes, {f['rows']} "
                            "rows now")
    return f"{key} {then} then, {now} now"


def exit_with_parent(worker_index: int = 0, worker_count: int = 1) -> None:
    """grain's worker_init_fn: a worker whose parent is gone (the trainer killed with
    SIGKILL, which no handler sees) ends itself within a second instead of holding its
    memory for hours as an orphan."""
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)
    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


PREFETCH_BATCHES = 64


def make_iterator(ds: grain.MapDataset, prefetch_threads: int = 2, signature=None,
                  worker_processes: int = 0, batches: int | None = None):
    """A checkpointable iterator (get_state / set_state) with a small thread prefetch:
    `PREFETCH_BATCHES` ahead, or `batches` where the caller will read no more (grain
    keeps its buffer full, so a 6-step run or a 2-batch evaluation would prepare 64
    batches it never reads; the order and the positions are the same either way).

    `worker_processes` > 0 runs the transforms (masking, corruption, packing) in
    that many grain worker processes, for hosts where one core cannot keep up
    (see benchmarks/input_pipeline.py). The position then depends on the worker
    count, which joins the signature.
    """
    ahead = PREFETCH_BATCHES if batches is None else max(1, min(PREFETCH_BATCHES, batches))
    options = grain.ReadOptions(num_threads=prefetch_threads, prefetch_buffer_size=ahead)
    iter_ds = ds.to_iter_dataset(options)
    if worker_processes > 0:
        iter_ds = iter_ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=worker_processes),
                                      worker_init_fn=exit_with_parent)
        signature = dict(signature or {}, worker_processes=worker_processes)
    return DataIterator(iter(iter_ds), signature)
