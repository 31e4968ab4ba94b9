"""Sources -> tokenized documents -> an objective's examples.

Documents are cut into groups of `data.docs_per_shard`; an objective builds its
examples from one group at a time (NSP draws its random next segments, T5 joins
its documents, inside a group), as create_pretraining_data.py works one input
shard at a time. That makes the work of a corpus of any size split over
processes, and it makes examples read from text here identical to the ones
`python -m pretrainx.data prepare` writes to ArrayRecord shards: with
`data.prepared_dir` set, training reads those shards and never tokenizes.
"""

import sys
from typing import Sequence

import numpy as np

from pretrainx.data import prepared, sources
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
        return [[np.asarray(encode(s if i == 0 else " " + s), np.int32)
                 for i, s in enumerate(doc)] for doc in docs]
    return [[np.asarray(encode(s), np.int32) for s in doc] for doc in docs]


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
            docs, stats = sources.read_documents(spec, **read_options(self.cfg.data))
            report(stats, spec)
            self._docs[spec], self.stats[spec] = tokenize(docs, self.tokenizer), stats
            stats["tokens"] = sum(int(s.size) for d in self._docs[spec] for s in d)
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
