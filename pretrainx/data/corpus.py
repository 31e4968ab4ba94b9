"""Sources -> tokenized documents -> an objective's examples.

Documents are cut into groups of `data.docs_per_shard`; an objective builds its
examples from one group at a time (NSP draws its random next segments, T5 joins
its documents, inside a group), as create_pretraining_data.py works one input
shard at a time. That makes the work of a corpus of any size split over
processes, and it makes examples read from text here identical to the ones
`python -m pretrainx.data prepare` writes to ArrayRecord shards: with
`data.prepared_dir` set, training reads those shards and never tokenizes.
"""

import collections
import os
import sys
from typing import Sequence

import numpy as np

from pretrainx.data import columnar, prepared, sources
from pretrainx.errors import UserError


def read_options(data) -> dict:
    """The data.* keys that say how to read a source."""
    return dict(fmt=data.format, text_field=data.text_field, skip_bad_lines=data.skip_bad_lines,
                tfds_data_dir=data.tfds_data_dir, tfds_reader=data.tfds_reader)


def tokenize(docs, tokenizer) -> list:
    """Documents of sentence strings -> documents of int32 token-id arrays.

    Byte-level BPE spells the space between words into the next token (" the"), so
    for it every sentence after a document's first is encoded after a space, and
    the sentences' ids join into the document's text."""
    encode = tokenizer.encode
    if getattr(tokenizer, "spaces_are_tokens", False):
        return [[_frozen(encode(s if i == 0 else " " + s)) for i, s in enumerate(doc)]
                for doc in docs]
    return [[_frozen(encode(s)) for s in doc] for doc in docs]


def _frozen(ids) -> np.ndarray:
    # read-only: a sentence's ids are shared by every epoch, phase and run that reads them
    array = np.asarray(ids, np.int32)
    array.flags.writeable = False
    return array


# Tokenized sources shared by the Corpus objects of one process: a multi-phase run reads
# its files again at each phase and each evaluation, and a benchmark's branches and
# evaluations again (benchmarks/mmbert_languages.py read its nine files 116 times, 40% of
# its time). Local files only, keyed by their sizes and modification times, the read
# options and the tokenizer's own files (tokenizers.load_tokenizer's `source_key`); the
# least recently used go first past SHARED_TOKENS.
SHARED_TOKENS = 50_000_000
_shared = collections.OrderedDict()


def _shared_key(spec, options: dict, tokenizer):
    tokenizer_key = getattr(tokenizer, "source_key", None)
    patterns = spec.split(",") if isinstance(spec, str) else list(spec)
    remote = any(columnar.is_remote((p or "").strip()) for p in patterns)
    if tokenizer_key is None or sources.is_tfds(spec) or remote:
        return None  # not shared: listing remote files here would fetch their listing twice
    paths = sources.expand_patterns(spec)
    if not all(os.path.isfile(p) for p in paths):  # a save_to_disk folder
        return None
    files = tuple((p, s.st_size, s.st_mtime_ns) for p in paths for s in [os.stat(p)])
    return tokenizer_key, files, tuple(sorted(options.items()))


def _read_tokenized(spec, options: dict, tokenizer):
    """(documents of token-id arrays, stats) of one source, from the process's share when
    the same files were tokenized the same way before."""
    key = _shared_key(spec, options, tokenizer)
    if key is not None and key in _shared:
        _shared.move_to_end(key)
        docs, stats = _shared[key]
        report(stats, spec)
        return docs, dict(stats)
    docs, stats = sources.read_documents(spec, **options)
    report(stats, spec)
    docs = tokenize(docs, tokenizer)
    stats["tokens"] = sum(int(s.size) for d in docs for s in d)
    if key is not None and stats["tokens"] <= SHARED_TOKENS:
        _shared[key] = (docs, dict(stats))
        while sum(v[1]["tokens"] for v in _shared.values()) > SHARED_TOKENS:
            _shared.popitem(last=False)
    return docs, stats


def group_bounds(num_docs: int, docs_per_shard: int) -> list:
    step = max(int(docs_per_shard), 1)
    return [(a, min(a + step, num_docs)) for a in range(0, num_docs, step)]


def report(stats: dict, where: str) -> None:
    """One warning line for text that was replaced or skipped on the way in."""
    notes = []
    if stats.get("replaced_chars"):
        notes.append(f"{stats['replaced_chars']} undecodable bytes replaced")
    if stats.get("skipped_lines"):
        notes.append(f"{stats['skipped_lines']} bad lines skipped")
    if stats.get("truncated_files"):
        notes.append(f"{stats['truncated_files']} truncated files cut at the break")
    if notes:
        print(f"warning: {where}: {', '.join(notes)}", file=sys.stderr, flush=True)


def held_out(num_docs: int, percent: float) -> int:
    """How many leading documents `data.eval_split_percent` holds out (at least one)."""
    return min(max(int(num_docs * percent / 100), 1), num_docs - 1) if percent else 0


class Corpus:
    """An objective's view of its sources: tokenized once, examples per phase."""

    def __init__(self, cfg, tokenizer):
        self.cfg, self.tokenizer = cfg, tokenizer
        self._docs, self.stats = {}, {}

    def documents(self, spec) -> list:
        if spec not in self._docs:
            self._docs[spec], self.stats[spec] = _read_tokenized(
                spec, read_options(self.cfg.data), self.tokenizer)
        return self._docs[spec]

    def split_documents(self, spec, train: bool) -> list:
        """A source's documents, less (train) or only (eval) the held-out ones when
        data.eval_split_percent holds some out; else all of them."""
        docs = self.documents(spec)
        percent = self.cfg.data.eval_split_percent
        if not percent:
            return docs
        cut = held_out(len(docs), percent)
        if len(docs) < 2:
            raise UserError(f"{spec} has {len(docs)} document: too few to hold out "
                            f"data.eval_split_percent={self.cfg.data.eval_split_percent}")
        return docs[cut:] if train else docs[:cut]

    def tokens(self, spec) -> int:
        """Tokens in a train source (what temperature sampling weighs): counted once, when
        it is tokenized here or when `prepare` stored it."""
        if self.cfg.data.prepared_dir:
            return int(self.stats[spec]["tokens"])
        return sum(int(s.size) for d in self.split_documents(spec, True) for s in d)

    def examples(self, objective, spec, phase, train: bool) -> Sequence:
        """The examples of one source (train: one of data.train_files' sources)."""
        if self.cfg.data.prepared_dir:
            examples, self.stats[spec] = prepared.open_examples(self.cfg, self.tokenizer, spec,
                                                                phase, train)
            return examples
        docs = self.split_documents(spec, train)
        out = []
        for group, (a, b) in enumerate(group_bounds(len(docs), self.cfg.data.docs_per_shard)):
            out.extend(objective.examples_from_documents(docs[a:b], phase, train, group))
        return out
