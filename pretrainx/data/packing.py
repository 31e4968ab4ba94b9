"""Packing several variable-length examples into fixed-length rows.

As seqio's trim-and-pack: each feature of an example is cut to the row length,
examples are placed first-fit, and each row carries `*_segment_ids` (1, 2, ...
per example, 0 on padding) and `*_positions` (restarting at 0 in every segment).
The plan (which example goes in which row) is made from lengths alone, ahead of
time, so the packed dataset stays random-access and resumable.
"""

from typing import Sequence

import numpy as np


def plan_rows(lengths: Sequence[Sequence[int]], capacity: Sequence[int],
              lookback: int | None = None) -> list[list[int]]:
    """First-fit: example i joins the first open row where every feature still fits.

    `lengths[i]` holds one length per feature (inputs, targets, ...), already cut
    to `capacity`. A row is closed once any feature is full, which keeps the
    search short when most examples fill a row on their own. `lookback`: only the
    newest this many open rows are searched (older ones close), so that examples which
    nearly fill a row cannot make the search quadratic in the corpus.
    """
    capacity = np.asarray(capacity)
    rows, room, open_rows = [], [], []
    for i, length in enumerate(lengths):
        need = np.minimum(np.asarray(length), capacity)
        for slot, r in enumerate(open_rows):
            if np.all(room[r] >= need):
                break
        else:
            r = len(rows)
            rows.append([])
            room.append(capacity.copy())
            open_rows.append(r)
            slot = len(open_rows) - 1
        rows[r].append(i)
        room[r] = room[r] - need
        if np.any(room[r] == 0):
            open_rows.pop(slot)
        if lookback is not None and len(open_rows) > lookback:
            open_rows.pop(0)
    return rows


def pack_feature(parts: Sequence[np.ndarray], length: int):
    """(tokens, segment_ids, positions) of one feature of a row, zero-padded."""
    tokens = np.zeros(length, np.int32)
    segments = np.zeros(length, np.int32)
    positions = np.zeros(length, np.int32)
    offset = 0
    for segment, part in enumerate(parts, start=1):
        part = np.asarray(part)[:length - offset]
        n = part.size
        tokens[offset:offset + n] = part
        segments[offset:offset + n] = segment
        positions[offset:offset + n] = np.arange(n)
        offset += n
    return tokens, segments, positions


def shift_right_by_segment(targets: np.ndarray, segments: np.ndarray, start_id: int = 0):
    """Teacher-forcing decoder inputs: targets moved one right inside each segment,
    `start_id` at every segment start, so no segment sees another's last token."""
    shifted = np.full_like(targets, start_id)
    shifted[1:] = targets[:-1]
    starts = np.ones_like(segments, bool)
    starts[1:] = segments[1:] != segments[:-1]
    shifted[starts] = start_id
    return np.where(segments > 0, shifted, 0).astype(np.int32)
