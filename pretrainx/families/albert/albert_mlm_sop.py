"""ALBERT's objective (Lan et al. 2020): n-gram masked LM + sentence-order prediction.

Pairs (`create_sop_examples`), built once per `dupe_factor` pass as BERT's are:
google-research/albert's create_instances_from_document with its default
random_next_sentence=False. A chunk of whole sentences of one document, about
`target` tokens long (10% of the targets are short), is split at a random sentence
boundary into A (the first part) and B (the rest); with probability 0.5 the pair
is [CLS] A [SEP] B [SEP] (label 0, in order), otherwise [CLS] B [SEP] A [SEP]
(label 1, swapped). There is no NSP: B never comes from another document. Two
deliberate differences: a chunk of one sentence takes the next sentence as B (the
original pairs it with a random document's text and labels it 1, which is NSP,
not SOP), and a document's last sentence left alone in a chunk is dropped; the
short target is drawn per pair, as in our BERT pairs.

Masks (`mask_ngrams`), drawn at batch time from the example's RNG (a fresh mask
every epoch, as our BERT objective):

* units are n-grams of whole words (SentencePiece "▁" / WordPiece "##" decide
  where a word starts), n in 1..3 with p(n) proportional to 1/n: 6/11, 3/11, 2/11
  (create_masked_lm_predictions with ngram=3, favor_shorter_ngram=True,
  do_whole_word_mask=True);
* start words in random order; n is drawn from p renormalised over the lengths
  that fit before the row's end or a special token (an n-gram never spans
  [SEP]); while the n-gram would pass the 15% budget it is shortened, and if even
  one word does not fit, or a word is already masked, the start is skipped;
* 15% of the row's non-special tokens (stochastic rounding, capped at
  `max_predictions_per_seq`), as our BERT objective;
* 80/10/10 is decided per token, not per n-gram, as google-research/albert does:
  each masked token becomes [MASK] with p 0.8, stays with p 0.1, becomes a random
  non-special token with p 0.1.

Every prediction also carries its unit's first position (`ngram_start`) and its
length in words (`ngram_words`), for `--stats`; the model does not read them.
"""

import numpy as np

from pretrainx.errors import UserError
from pretrainx.models import transformer_encoder as enc
from pretrainx.objectives import assembled, encoder, mlm, nsp, packed_pairs, pairs

IN_ORDER = 0
SWAPPED = 1
_LABEL = "sentence_order_label"
_NGRAM_KEYS = ("ngram_start", "ngram_words")


def ngram_probs(max_ngram: int) -> np.ndarray:
    """p(n) for n = 1..max_ngram, proportional to 1/n (ALBERT's favor_shorter_ngram)."""
    probs = 1.0 / np.arange(1, max_ngram + 1)
    return probs / probs.sum()


# ---- sentence-order pairs ------------------------------------------------------
def _document_pairs(doc, max_seq_length, short_seq_prob, rng, cls_id, sep_id):
    sentences = doc[2]
    max_num_tokens = max_seq_length - 3
    draw_target = nsp.target_lengths(rng, short_seq_prob, max_num_tokens)
    target = draw_target()
    examples = []
    chunk_start, current_length, i = 0, 0, 0
    while i < len(sentences):
        current_length += len(sentences[i])
        if i == len(sentences) - 1 or current_length >= target:
            if i == chunk_start and i + 1 < len(sentences):
                i += 1  # one sentence: the next one is B
            chunk = sentences[chunk_start:i + 1]
            if len(chunk) >= 2:  # else: a document's last sentence, alone: dropped
                a_end = int(rng.integers(1, len(chunk)))
                first, second = nsp.concat(chunk[:a_end]), nsp.concat(chunk[a_end:])
                first_span = nsp.span(doc, chunk_start, chunk_start + a_end)
                second_span = nsp.span(doc, chunk_start + a_end, chunk_start + len(chunk))
                label = SWAPPED if rng.random() < 0.5 else IN_ORDER
                tokens_a, tokens_b = (second, first) if label == SWAPPED else (first, second)
                a_span, b_span = ((second_span, first_span) if label == SWAPPED
                                  else (first_span, second_span))
                tokens_a, tokens_b = nsp.truncate_seq_pair(tokens_a, tokens_b, max_num_tokens,
                                                           rng)
                input_ids, token_type_ids = nsp.pack_pair(tokens_a, tokens_b, cls_id, sep_id)
                examples.append({"input_ids": input_ids, "token_type_ids": token_type_ids,
                                 "sentence_order_label": np.int32(label),
                                 "doc_index": doc[0], "a_span": a_span, "b_span": b_span})
            chunk_start, current_length = i + 1, 0
            target = draw_target()
        i += 1
    return examples


def create_sop_examples(documents, max_seq_length, short_seq_prob, rng, cls_id, sep_id):
    """Sentence-order pairs from tokenized documents (lists of int id arrays).

    Each example has `input_ids`, `token_type_ids` (unpadded, at most
    `max_seq_length`), `sentence_order_label` (0 in order, 1 swapped) and
    provenance: `doc_index`, and `a_span`/`b_span` = (doc, first sentence, end)
    of the segments as they stand in the row (swapped: a_span follows b_span in
    the document). Documents of one sentence give no pair.
    """
    if max_seq_length < 5:
        raise UserError(f"max_seq_length={max_seq_length} is too small for a "
                        "sentence pair; need at least 5")
    if not 0.0 <= short_seq_prob <= 1.0:
        raise UserError(f"short_seq_prob={short_seq_prob} must be in [0, 1]")
    examples = []
    for doc in nsp.nonempty(documents):
        examples.extend(_document_pairs(doc, max_seq_length, short_seq_prob, rng,
                                        cls_id, sep_id))
    if not examples:
        raise UserError(f"no document of two or more sentences to make a sentence-order "
                        f"pair ({len(documents)} documents)")
    return examples


# ---- n-gram masking -------------------------------------------------------------
def mask_ngrams(input_ids, rng, *, vocab_size, mask_id, special_ids, word_starts,
                max_predictions, mask_prob, max_ngram=3, record=None):
    """ALBERT's n-gram masking of one padded sequence (see the module docstring).

    Returns BERT's masked-LM features (positions sorted, padded to
    `max_predictions`) plus, per prediction, `ngram_start` (the first position of
    its n-gram) and `ngram_words` (the n-gram's n). With a `record` list, appends
    (n that fits, n drawn, n taken or 0 if skipped) per start word tried.
    """
    input_ids = np.asarray(input_ids)
    special_ids = np.asarray(special_ids, np.int64)
    candidates, first, end, joined = mlm.word_spans(input_ids, special_ids, word_starts)
    n_words = first.size
    reach = np.ones(n_words, np.int64)  # words of an n-gram that may start at w
    for w in range(n_words - 2, -1, -1):
        if joined[w]:
            reach[w] = min(reach[w + 1] + 1, max_ngram)
    cdfs = [np.cumsum(ngram_probs(max_ngram)[:a]) / ngram_probs(max_ngram)[:a].sum()
            for a in range(1, max_ngram + 1)]
    budget = mlm.num_to_predict(candidates.size, max_predictions, mask_prob, rng)
    covered = np.zeros(n_words, bool)
    units, count = [], 0
    for w in rng.permutation(n_words):
        if count >= budget:
            break
        fits = int(reach[w])
        # min: the cdf's last entry is 1.0 only up to rounding
        drawn = min(int(np.searchsorted(cdfs[fits - 1], rng.random(), side="right")) + 1, fits)
        n = drawn
        while n > 1 and count + end[w + n - 1] - first[w] > budget:
            n -= 1
        ok = count + end[w + n - 1] - first[w] <= budget and not covered[w:w + n].any()
        if record is not None:
            record.append((fits, drawn, n if ok else 0))
        if not ok:
            continue
        covered[w:w + n] = True
        count += int(end[w + n - 1] - first[w])
        units.append((int(first[w]), int(end[w + n - 1]), n))

    out = {k: np.zeros(max_predictions, np.int32)
           for k in ("masked_lm_positions", "masked_lm_ids", "ngram_start", "ngram_words")}
    weights = np.zeros(max_predictions, np.float32)
    masked = input_ids.astype(np.int32, copy=True)
    if units:
        positions = np.concatenate([np.arange(s, e) for s, e, _ in units])
        starts = np.concatenate([np.full(e - s, s) for s, e, _ in units])
        words = np.concatenate([np.full(e - s, n) for s, e, n in units])
        order = np.argsort(positions)
        positions, starts, words = positions[order], starts[order], words[order]
        k = positions.size
        u = rng.random(k)  # per token, as google-research/albert
        to_mask = u < mlm.MASK_FRACTION
        to_random = u >= mlm.MASK_FRACTION + mlm.KEEP_FRACTION
        masked[positions[to_mask]] = mask_id
        masked[positions[to_random]] = mlm.random_non_special(
            int(to_random.sum()), vocab_size, special_ids, rng)
        out["masked_lm_positions"][:k] = positions
        out["masked_lm_ids"][:k] = input_ids[positions]
        out["ngram_start"][:k] = starts
        out["ngram_words"][:k] = words
        weights[:k] = 1.0
    return dict(out, input_ids=masked, masked_lm_weights=weights)


def ngram_masking(tokenizer, data_cfg):
    """mask(padded, rng, special ids, max_predictions): mask_ngrams at data.mask_prob
    with n-grams of up to data.max_ngram words."""
    def mask(padded, rng, specials, max_predictions):
        return mask_ngrams(padded, rng, vocab_size=tokenizer.vocab_size,
                           mask_id=tokenizer.mask_id, special_ids=specials,
                           word_starts=tokenizer.word_start_mask(padded),
                           max_predictions=max_predictions, mask_prob=data_cfg.mask_prob,
                           max_ngram=data_cfg.max_ngram)
    return mask


class AlbertMlmSop(assembled.Assembled):
    """BERT's model and pipeline with ALBERT's pairs, masks and SOP loss. The model is
    families/bert/model.py with model.embedding_size and model.share_layers; its 2-way head on
    the pooled [CLS] (named `nsp`, as BERT's) classifies sentence order."""
    flops_formula = ("3 * (L * (2*(4*h^2 + 2*h*mlp) + 4*seq*h) + 2*E*h "
                     "+ (P*2*(h*E + E*V) + 2*(h^2 + 2*h)) / seq), P = max_predictions_per_seq")

    def __init__(self, cfg, tokenizer):
        rows = pairs.PairRows(cfg, tokenizer, make_pairs=create_sop_examples,
                              mask=ngram_masking(tokenizer, cfg.data), label_key=_LABEL,
                              prediction_keys=_NGRAM_KEYS, offset_keys=("ngram_start",))
        super().__init__(cfg, tokenizer, enc.EncoderForPreTraining(cfg.model),
                         encoder.masked_corpus(cfg, tokenizer), data=rows,
                         losses=pairs.PairLoss(_LABEL, "sop"))

    def flops_per_token(self, phase) -> float:
        return enc.flops_per_token(self.cfg.model, phase.seq_len, phase.max_predictions)

    # ---- statistics (python -m pretrainx.data --stats) ----------------------
    def batch_stats(self, batch) -> dict:
        chosen = batch["masked_lm_weights"] > 0
        counts = mlm.masking_counts(batch, self.tokenizer.mask_id,
                                    encoder.unmasked_specials(self.tokenizer))
        labels = batch[_LABEL]
        weights = packed_pairs.real_examples(batch, _LABEL)
        out = {**counts, "examples": int(weights.sum()),
               "swapped": int(((labels == SWAPPED) & weights).sum())}
        # One n-gram per distinct start in a row.
        rows = np.broadcast_to(np.arange(chosen.shape[0])[:, None], chosen.shape)
        unit = np.unique(np.stack([rows[chosen], batch["ngram_start"][chosen],
                                   batch["ngram_words"][chosen]]), axis=1)
        lengths = np.bincount(unit[2], minlength=4)
        for n in (1, 2, 3):
            out[f"ngrams_{n}"] = int(lengths[n])
        out["ngrams"] = int(unit.shape[1])
        out["ngram_words"] = int(unit[2].sum())
        return out

    def summarize_stats(self, totals, phase) -> dict:
        units = max(totals["ngrams"], 1)
        return {**encoder.masking_summary(totals),
                "max_predictions_per_seq": phase.max_predictions,
                **{f"ngram_{n}_fraction": totals[f"ngrams_{n}"] / units for n in (1, 2, 3)},
                "mean_ngram_words": totals["ngram_words"] / units,
                "mean_ngram_tokens": totals["masked"] / units,
                "sop_swapped_fraction": totals["swapped"] / max(totals["examples"], 1),
                "padding_fraction": 1 - totals["real_tokens"] / max(totals["all_tokens"], 1),
                "examples_per_row": totals["examples"] / max(totals["rows"], 1)}

    def show(self, batch, count: int) -> list:
        return encoder.show_rows(self.tokenizer, batch, count, packed_pairs.label_text(
            batch, _LABEL, lambda label: "Swapped" if label == SWAPPED else "InOrder"))
