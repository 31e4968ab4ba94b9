"""Rows of whole sentences: RoBERTa's FULL-SENTENCES and SpanBERT's single segments, and
RoBERTa's rows kept inside their documents and packed several to a row (Krell et al.)."""

import numpy as np

from pretrainx.data import packing
from pretrainx.objectives import encoder, mlm, packed_pairs


def pack_sentences(docs, capacity: int, separator: int | None):
    """Rows of at most `capacity` tokens made of whole sentences in document order.

    With `separator`, rows run on across documents and a boundary inside a row
    costs one `separator` token (RoBERTa's FULL-SENTENCES); with None, a row
    never holds two documents (SpanBERT's single segments). A sentence longer
    than `capacity` is cut into rows of its own. Returns int32 arrays.
    """
    rows, row, used = [], [], 0
    sep = None if separator is None else np.array([separator], np.int32)

    def close():
        nonlocal row, used
        if used:
            rows.append(np.concatenate(row).astype(np.int32))
        row, used = [], 0

    for doc in docs:
        if sep is None:
            close()
        pending = used > 0  # a boundary inside the row costs one separator
        for sentence in doc:
            sentence = np.asarray(sentence, np.int32)
            while sentence.size:
                if used + pending + sentence.size > capacity:
                    if used:  # the row is full: the sentence starts the next one
                        close()
                        pending = False
                        continue
                    piece, sentence = sentence[:capacity], sentence[capacity:]
                else:
                    piece, sentence = sentence, sentence[:0]
                if pending:
                    row.append(sep)
                    used, pending = used + 1, False
                row.append(piece)
                used += piece.size
    close()
    return rows


def sentence_rows(docs, cfg, phase, train: bool, group: int, tokenizer,
                  cross_documents: bool) -> list:
    """<s> row </s> of whole sentences (see pack_sentences); documents shuffled for
    training, so a row joins different neighbours in every run seed."""
    key = [cfg.seed, phase.seq_len, int(train)] + ([group] if group else [])
    order = np.random.default_rng(key).permutation(len(docs)) if train else range(len(docs))
    separator = tokenizer.sep_id if cross_documents else None
    rows = pack_sentences([docs[d] for d in order], phase.seq_len - 2, separator)
    bos, eos = np.array([tokenizer.cls_id], np.int32), np.array([tokenizer.sep_id], np.int32)
    return [{"input_ids": np.concatenate([bos, r, eos])} for r in rows]


def document_examples(docs, cfg, phase, train: bool, group: int, tokenizer) -> list:
    """[CLS] piece [SEP] arrays for pack_examples: each document's tokens cut into pieces
    of phase.seq_len - 2 (the last one shorter), documents shuffled for training. Pieces
    that end anywhere, not at a sentence, are what lets packed rows come out over 99%
    full as ModernBERT's do: whole sentences leave the end of most rows empty."""
    key = [cfg.seed, phase.seq_len, int(train)] + ([group] if group else [])
    order = np.random.default_rng(key).permutation(len(docs)) if train else range(len(docs))
    bos, eos = np.array([tokenizer.cls_id], np.int32), np.array([tokenizer.sep_id], np.int32)
    capacity, out = phase.seq_len - 2, []
    for d in order:
        ids = np.concatenate([np.asarray(s, np.int32) for s in docs[d]] or [eos[:0]])
        out.extend(np.concatenate([bos, ids[i:i + capacity], eos])
                   for i in range(0, ids.size, capacity))
    return out


def full_sentences_stats(batch, tokenizer) -> dict:
    """--stats counts of FULL-SENTENCES MLM rows (RoBERTa's, DistilBERT's): masking,
    examples (segments) a row, and documents: a </s> followed by a token of its own
    segment is a boundary between documents inside one example."""
    segments = batch["attention_mask"]
    counts = mlm.masking_counts(batch, tokenizer.mask_id, tokenizer.special_ids())
    inner = (mlm.unmasked_ids(batch) == tokenizer.sep_id) & (segments > 0)
    inner[:, :-1] &= segments[:, 1:] == segments[:, :-1]
    inner[:, -1] = False
    boundaries = inner.sum(axis=1)
    return {**counts, "examples": int(segments.max(axis=1).sum()),
            "rows_crossing_documents": int((boundaries > 0).sum()),
            "full_rows": encoder.full_rows(batch)}


def full_sentences_summary(totals, phase) -> dict:
    rows_seen = max(totals["rows"], 1)
    return {**encoder.masking_summary(totals),
            "rows_crossing_documents_fraction": totals["rows_crossing_documents"] / rows_seen,
            "rows_at_least_95pct_full_fraction": totals["full_rows"] / rows_seen,
            "padding_fraction": 1 - totals["real_tokens"] / max(totals["all_tokens"], 1),
            "examples_per_row": totals["examples"] / rows_seen,
            "max_predictions_per_seq": phase.max_predictions}


def full_sentences_transform(tokenizer, data_cfg, phase):
    """(row, rng) -> the row padded, with a fresh mask (dynamic masking: 15%, 80/10/10)
    and one segment: what RoBERTa, DistilBERT and DeBERTa's MLM train on."""
    specials = tokenizer.special_ids()
    seq_len, max_pred = phase.seq_len, phase.max_predictions

    def fn(example, rng):
        padded, attention = encoder.pad_row(example, seq_len, tokenizer.pad_id)
        masked = mlm.mask_tokens(padded, rng, vocab_size=tokenizer.vocab_size,
                                 mask_id=tokenizer.mask_id, special_ids=specials,
                                 max_predictions=max_pred, mask_prob=data_cfg.mask_prob)
        return dict(masked, token_type_ids=np.zeros(seq_len, np.int32), attention_mask=attention)

    return fn


class FullSentencesRows:
    """The data part of an objective on FULL-SENTENCES rows with dynamic masking
    (RoBERTa, DistilBERT, DeBERTa, the crammed BERT; assembled.py): examples, the batch
    transform, --stats and --show. With data.pack_examples (an objective that declares
    it: RoBERTa), rows stay inside their documents and are packed several to a row,
    each isolated (packed_pairs.py)."""

    def __init__(self, cfg, tokenizer):
        self.cfg, self.tokenizer = cfg, tokenizer
        self.packed = packed_pairs.packs(cfg)

    def examples_from_documents(self, docs, phase, train: bool, group: int = 0) -> list:
        """Rows that run on across documents, a </s> (or [SEP]) between two; packed:
        rows that end with their document, several a row."""
        rows = sentence_rows(docs, self.cfg, phase, train, group, self.tokenizer,
                             cross_documents=not self.packed)
        if self.packed:
            return packing.pack_pairs(rows, phase.seq_len,
                                           self.cfg.data.max_examples_per_row, label_key=None)
        return rows

    def transform(self, phase, train: bool, data_cfg=None):
        """(row, rng) -> padded row with a fresh mask (dynamic masking); `data_cfg`: the
        masking keys when they are not the run's (an eval at another rate)."""
        fn = full_sentences_transform(self.tokenizer, data_cfg or self.cfg.data, phase)
        if not self.packed:
            return fn
        return packed_pairs.packed_transform(fn, phase.seq_len, self.cfg.data.max_examples_per_row,
                                             phase.max_predictions, self.tokenizer.pad_id,
                                             label_key=None)

    def example_batch(self, batch_size: int, phase) -> dict:
        batch = encoder.example_batch(batch_size, phase)
        if self.packed:
            batch.update(packed_pairs.example_batch_extras(
                batch_size, phase.seq_len, self.cfg.data.max_examples_per_row,
                phase.max_predictions, label_key=None))
        return batch

    def describe(self, phase) -> dict:
        return packed_pairs.describe(self.cfg, phase)

    def batch_stats(self, batch) -> dict:
        return full_sentences_stats(batch, self.tokenizer)

    def summarize_stats(self, totals, phase) -> dict:
        return full_sentences_summary(totals, phase)

    def show(self, batch, count: int) -> list:
        return encoder.show_rows(self.tokenizer, batch, count)
