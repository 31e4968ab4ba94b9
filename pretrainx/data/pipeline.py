"""grain pipeline: examples -> shuffled epochs -> per-example transform -> this
process's rows of each global batch -> batches of numpy arrays.

Everything is random access (grain MapDataset), so the iterator state is just a
position: a restored run sees exactly the batches it would have seen. The
transform's RNG is keyed by the global row index, and each process takes a
contiguous block of every global batch, so the global batch is the same whatever
the number of processes.
"""

from typing import Callable, Sequence

import grain
import jax


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
                 shuffle: bool = True, process_index: int | None = None,
                 process_count: int | None = None) -> grain.MapDataset:
    """Infinite dataset of this process's batches (dicts of stacked numpy arrays)."""
    process_index = jax.process_index() if process_index is None else process_index
    process_count = jax.process_count() if process_count is None else process_count
    if global_batch % process_count:
        raise ValueError(f"global batch {global_batch} does not divide over "
                         f"{process_count} processes")
    ds = grain.MapDataset.source(examples)
    if shuffle:
        ds = ds.shuffle(seed=seed)
    ds = ds.repeat(None)  # a fresh permutation every epoch
    ds = ds.random_map(transform, seed=seed + 1)  # fresh masks every epoch
    ds = _ProcessRows(ds, global_batch, process_index, process_count)
    return ds.batch(global_batch // process_count, drop_remainder=True)


def make_iterator(ds: grain.MapDataset, prefetch_threads: int = 2):
    """A checkpointable iterator (get_state / set_state) with a small thread prefetch."""
    options = grain.ReadOptions(num_threads=prefetch_threads, prefetch_buffer_size=64)
    return iter(ds.to_iter_dataset(options))
