"""SpanBERT's objective (Joshi et al. 2020): span masking, MLM + span boundary objective.

Examples are single segments of whole sentences from one document, up to
seq_len - 2 tokens, [CLS] ... [SEP] (no NSP, no second segment: the paper's
section 3.3). At batch time (a new draw every epoch, as RoBERTa's dynamic
masking) spans are masked until 15% of the tokens are (`mask_spans`):

* a span's length in words is drawn from Geo(p = 0.2) on 1..10, renormalised
  (SpanBERT's code: the distribution cut at 10, mean 3.8 words; clamping the
  tail at 10 instead would give a mean of 4.46);
* its first word is uniform among the words not yet masked; a span is whole
  words (WordPiece continuations go with their word), so its length in tokens
  is longer than in words;
* a span stops early at the row's end, at a word already masked, and where its
  next word would overshoot the 15% budget (its first word is always taken);
* 80% of the spans become all [MASK], 10% all random tokens, 10% stay as they were
  (decided per span, not per token).

The span boundary objective predicts every masked token from the encoder outputs
at the span's boundary tokens and its position in the span (families/spanbert/model.py);
the loss is the MLM cross-entropy plus the SBO cross-entropy, both means over the
masked tokens.
"""

import numpy as np

from pretrainx.data import corpus
from pretrainx.families.spanbert import model as spanbert
from pretrainx.objectives import encoder, mlm, rows


def span_length_probs(p: float, max_words: int) -> np.ndarray:
    """P(length = 1..max_words): Geo(p) cut at max_words and renormalised."""
    lengths = np.arange(1, max_words + 1)
    probs = p * (1.0 - p) ** (lengths - 1)
    return probs / probs.sum()


def mask_spans(input_ids, rng, *, vocab_size, mask_id, special_ids, word_starts,
               max_predictions, mask_prob, geometric_p=0.2, max_span_words=10,
               record=None):
    """Span masking of one padded sequence (see the module docstring).

    Returns BERT's masked-LM features (positions sorted, padded to
    `max_predictions`) plus, per prediction, the span's boundary positions
    `sbo_left` = s - 1 and `sbo_right` = e + 1 and `sbo_offset` = i - s. With a
    `record` list, appends one (sampled words, taken words, taken tokens) per span.
    """
    input_ids = np.asarray(input_ids)
    special_ids = np.asarray(special_ids, np.int64)
    candidates, first, end, joined = mlm.word_spans(input_ids, special_ids, word_starts)
    n_words = first.size
    budget = mlm.num_to_predict(candidates.size, max_predictions, mask_prob, rng)
    probs = span_length_probs(geometric_p, max_span_words)
    taken = np.zeros(n_words, bool)
    spans, count = [], 0
    while count < budget and not taken.all():
        want = int(rng.choice(max_span_words, p=probs)) + 1
        free = np.flatnonzero(~taken)
        w0 = int(free[rng.integers(free.size)])
        if count + end[w0] - first[w0] > max_predictions:
            break  # the first word alone would pass the cap
        w = w0
        count += end[w] - first[w]
        taken[w] = True
        while (w - w0 + 1 < want and count < budget and joined[w] and not taken[w + 1]
               and count + end[w + 1] - first[w + 1] <= budget):
            w += 1
            count += end[w] - first[w]
            taken[w] = True
        spans.append((int(first[w0]), int(end[w])))
        if record is not None:
            record.append((want, w - w0 + 1, int(end[w] - first[w0])))

    masked = input_ids.astype(np.int32, copy=True)
    positions, left, right, offset = [], [], [], []
    for s, e in spans:
        u = rng.random()
        if u < mlm.MASK_FRACTION:
            masked[s:e] = mask_id
        elif u >= mlm.MASK_FRACTION + mlm.KEEP_FRACTION:
            masked[s:e] = mlm.random_non_special(e - s, vocab_size, special_ids, rng)
        positions.append(np.arange(s, e))
        left.append(np.full(e - s, s - 1))
        right.append(np.full(e - s, e))
        offset.append(np.arange(e - s))
    out = {k: np.zeros(max_predictions, np.int32)
           for k in ("masked_lm_positions", "masked_lm_ids", "sbo_left", "sbo_right",
                     "sbo_offset")}
    weights = np.zeros(max_predictions, np.float32)
    if spans:
        pos = np.concatenate(positions)
        order = np.argsort(pos)
        n = pos.size
        out["masked_lm_positions"][:n] = pos[order]
        out["masked_lm_ids"][:n] = input_ids[pos[order]]
        for key, parts in (("sbo_left", left), ("sbo_right", right), ("sbo_offset", offset)):
            out[key][:n] = np.concatenate(parts)[order]
        weights[:n] = 1.0
    return dict(out, input_ids=masked, masked_lm_weights=weights)


class SpanMlm:
    flops_formula = ("3 * (L * (2*(4*h^2 + 2*h*mlp) + 4*seq*h) + P*2*(5*h^2 + 2*h*V) / seq), "
                     "P = max_predictions_per_seq")

    def __init__(self, cfg, tokenizer):
        self.cfg = cfg
        self.model = spanbert.SpanBertForPreTraining(cfg.model)
        if tokenizer is not None:
            encoder.check_row_tokenizer(tokenizer, cfg, "SpanBERT", "[CLS] ... [SEP]")
        self.tokenizer = tokenizer
        self.corpus = corpus.Corpus(cfg, tokenizer)

    def describe(self, phase) -> dict:
        return {"max_predictions_per_seq": phase.max_predictions}

    # ---- data -------------------------------------------------------------
    def examples(self, files, phase, train: bool) -> list:
        return self.corpus.examples(self, files, phase, train)

    def examples_from_documents(self, docs, phase, train: bool, group: int = 0) -> list:
        """Single segments: a row holds one document's whole sentences."""
        return rows.sentence_rows(docs, self.cfg, phase, train, group, self.tokenizer,
                                  cross_documents=False)

    def transform(self, phase, train: bool):
        tok, data = self.tokenizer, self.cfg.data
        specials = tok.special_ids()
        seq_len, max_pred = phase.seq_len, phase.max_predictions

        def fn(example, rng):
            padded, attention = encoder.pad_row(example, seq_len, tok.pad_id)
            masked = mask_spans(padded, rng, vocab_size=tok.vocab_size, mask_id=tok.mask_id,
                                special_ids=specials, word_starts=tok.word_start_mask(padded),
                                max_predictions=max_pred, mask_prob=data.mask_prob,
                                geometric_p=data.geometric_p,
                                max_span_words=data.max_span_words)
            return dict(masked, token_type_ids=np.zeros(seq_len, np.int32),
                        attention_mask=attention)

        return fn

    def example_batch(self, batch_size: int, phase) -> dict:
        out = encoder.example_batch(batch_size, phase)
        for key in ("sbo_left", "sbo_right", "sbo_offset"):
            out[key] = np.zeros((batch_size, phase.max_predictions), np.int32)
        return out

    # ---- loss -------------------------------------------------------------
    def loss_sums(self, outputs, batch) -> dict:
        sums = mlm.mlm_loss_and_metrics(outputs["mlm_logits"], batch["masked_lm_ids"],
                                        batch["masked_lm_weights"])
        sbo = mlm.mlm_loss_and_metrics(outputs["sbo_logits"], batch["masked_lm_ids"],
                                       batch["masked_lm_weights"])
        sums.update(sbo_loss_sum=sbo["mlm_loss_sum"], sbo_correct_sum=sbo["mlm_correct_sum"])
        return sums

    def normalizers(self, batch) -> dict:
        return {"mlm": encoder.mlm_normalizer(batch)}

    def loss(self, sums, norms):
        """MLM + SBO: mean cross-entropies over the masked tokens."""
        return (sums["mlm_loss_sum"] + sums["sbo_loss_sum"]) / norms["mlm"]

    def metrics(self, sums, norms) -> dict:
        return dict(encoder.mlm_metrics(sums, norms),
                    sbo_loss=sums["sbo_loss_sum"] / norms["mlm"],
                    sbo_accuracy=sums["sbo_correct_sum"] / norms["mlm"])

    def eval_metrics(self, totals) -> dict:
        out = encoder.mlm_eval_metrics(totals)
        n = max(float(totals["mlm_weight_sum"]), 1.0)
        out = {"loss": out["mlm_loss"], **out}
        out.update(sbo_loss=float(totals["sbo_loss_sum"]) / n,
                   sbo_accuracy=float(totals["sbo_correct_sum"]) / n)
        out["loss"] = out["mlm_loss"] + out["sbo_loss"]
        return out

    def flops_per_token(self, phase) -> float:
        return spanbert.flops_per_token(self.cfg.model, phase.seq_len, phase.max_predictions)

    # ---- statistics (python -m pretrainx.data --stats) ----------------------
    token_features = ("input_ids",)

    def batch_stats(self, batch) -> dict:
        """Per span (a run of predictions sharing boundaries): its length in tokens and
        words and whether it became all [MASK] / all random / stayed."""
        ids, w = batch["input_ids"], batch["masked_lm_weights"] > 0
        positions = batch["masked_lm_positions"]
        real = batch["attention_mask"] > 0
        original = mlm.unmasked_ids(batch)
        starts = self.tokenizer.word_start_mask(original)
        candidates = real & ~np.isin(original, self.tokenizer.special_ids())
        out = {"real_tokens": int(real.sum()), "all_tokens": ids.size, "rows": ids.shape[0],
               "examples": ids.shape[0], "candidates": int(candidates.sum()),
               "masked": int(w.sum()), "spans": 0, "span_words": 0, "span_tokens": 0,
               "mask_spans": 0, "random_spans": 0, "kept_spans": 0}
        for row in range(ids.shape[0]):
            n = int(w[row].sum())
            key = batch["sbo_left"][row][:n]
            for s in np.unique(key):
                members = positions[row][:n][key == s]
                now, was = ids[row][members], original[row][members]
                out["spans"] += 1
                out["span_tokens"] += members.size
                out["span_words"] += int(starts[row][members].sum()) or 1
                if (now == self.tokenizer.mask_id).all():
                    out["mask_spans"] += 1
                elif (now == was).all():
                    out["kept_spans"] += 1
                else:
                    out["random_spans"] += 1
        return out

    def summarize_stats(self, totals, phase) -> dict:
        spans = max(totals["spans"], 1)
        return {"masked_fraction": totals["masked"] / max(totals["candidates"], 1),
                "mean_span_words": totals["span_words"] / spans,
                "mean_span_tokens": totals["span_tokens"] / spans,
                "mask_span_fraction": totals["mask_spans"] / spans,
                "random_span_fraction": totals["random_spans"] / spans,
                "kept_span_fraction": totals["kept_spans"] / spans,
                "max_predictions_per_seq": phase.max_predictions}

    def show(self, batch, count: int) -> list:
        return encoder.show_rows(self.tokenizer, batch, count)
