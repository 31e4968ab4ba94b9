"""Packing several variable-length examples into fixed-length rows.

As seqio's trim-and-pack: each feature of an example is cut to the row length,
examples are placed first-fit, and each row carries `*_segment_ids` (1, 2, ...
per example, 0 on padding) and `*_positions` (restarting at 0 in every segment).
The plan (which example goes in which row) is made from lengths alone, ahead of
time, so the packed dataset stays random-access and resumable.
"""

from typing import Sequence

import numpy as np

LOOKBACK = 64  # open rows first-fit searches when packing a corpus (plan_rows)
TOKEN_KEYS = ("input_ids", "token_type_ids")  # per-token arrays a packed example may carry


def plan_rows(lengths: Sequence[Sequence[int]], capacity: Sequence[int],
              lookback: int | None = None) -> list[list[int]]:
    """First-fit: example i joins the first open row where every feature still fits.

    `lengths[i]` holds one length per feature (inputs, and targets where there are
    any: one or two features), already cut to `capacity`. A row is closed once any
    feature is full, which keeps the search short when most examples fill a row on
    their own. `lookback`: only the newest this many open rows are searched (older ones
    close), so that examples which nearly fill a row cannot make the search quadratic in
    the corpus.
    """
    # Plain ints compared one by one, not numpy and not a generator over features: a
    # numpy call per comparison made BART's plan of four books take 70 s, and a
    # generator made plans 10-20x slower than this (50,000 random T5 lengths at
    # (128, 29), no lookback: 43.6 s -> 2.7 s). One feature runs as two, the second
    # needing nothing.
    if len(capacity) not in (1, 2):
        raise ValueError(f"plan_rows packs one or two features, not {len(capacity)}")
    two = len(capacity) == 2
    first, second = int(capacity[0]), int(capacity[1]) if two else 1
    rows, room, room2, open_rows = [], [], [], []
    for i, length in enumerate(lengths):
        need = min(int(length[0]), first)
        need2 = min(int(length[1]), second) if two else 0
        for slot, r in enumerate(open_rows):
            if room[r] >= need and room2[r] >= need2:
                break
        else:
            r = len(rows)
            rows.append([])
            room.append(first)
            room2.append(second)
            open_rows.append(r)
            slot = len(open_rows) - 1
        rows[r].append(i)
        room[r] -= need
        room2[r] -= need2
        if room[r] == 0 or room2[r] == 0:
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


def pack_examples(examples, seq_len: int) -> list:
    """Rows of seq_len holding several examples first-fit (plan_rows), each with
    `segment_ids` (1, 2, ... per example, 0 on padding) and `positions` that restart:
    what keeps packed examples from seeing each other (Krell et al. 2021)."""
    plan = plan_rows([[e.size] for e in examples], [seq_len], lookback=LOOKBACK)
    rows = []
    for members in plan:
        ids, segments, positions = pack_feature([examples[i] for i in members], seq_len)
        n = int((segments > 0).sum())
        rows.append({"input_ids": ids[:n], "segment_ids": segments[:n], "positions": positions[:n]})
    return rows


def pack_pairs(examples: list, seq_len: int, max_examples: int,
               label_key: str | None = "next_sentence_label") -> list:
    """Rows of at most `max_examples` examples and seq_len tokens, as flat arrays (so
    prepared storage holds them as any example): the examples' token arrays end to end,
    each example's length and (label_key: None for single segments) its label."""
    plan = plan_rows([[e["input_ids"].size, 1] for e in examples],
                     [seq_len, max_examples], lookback=LOOKBACK)
    keys = [k for k in TOKEN_KEYS if k in examples[0]] if examples else []
    rows = []
    for members in plan:
        row = {k: np.concatenate([examples[i][k] for i in members]) for k in keys}
        row["lengths"] = np.asarray([examples[i]["input_ids"].size for i in members], np.int32)
        if label_key is not None:
            row[label_key] = np.asarray([examples[i][label_key] for i in members], np.int32)
        rows.append(row)
    return rows
