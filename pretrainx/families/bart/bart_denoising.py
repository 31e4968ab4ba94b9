"""BART's denoising objective, the paper's final recipe (Lewis et al. 2020, section 3.2
and 5): text infilling plus sentence permutation, the decoder reconstructing the
original text.

Examples are whole sentences of one document up to seq_len - 2 tokens (a longer
sentence is cut), with their sentence lengths kept. At batch time (fresh noise every
epoch, keyed by the row's position) the sentences are shuffled, then spans with lengths
drawn from Poisson(3) cover 30% of the tokens, each span, a zero-length one included,
becoming a single <mask> (10% of them a random token instead, fairseq's mask_random).
The encoder reads <s> noised </s>, the decoder writes <s> original </s> from </s>
(fairseq's and HF's decoder start). Examples are packed into rows with segment ids:
no attention crosses a segment.

Drift, named: fairseq draws spans over whole words (its mask_whole_words over the
BPE's word starts); here they are drawn over tokens.
"""

import numpy as np

from pretrainx.data import bpe, corpus, packing
from pretrainx.errors import UserError
from pretrainx.families.bart import model as bart
from pretrainx.objectives import seq2seq

FEATURES = seq2seq.FEATURES + ("noise_counts",)
# noise_counts, per row: noised tokens, spans, permuted examples, examples of 2+ sentences
_COUNTS = 4


def infill(tokens, rng, mask_ratio: float, poisson_lambda: float, mask_id: int,
           random_ratio: float, vocab_size: int):
    """(noised tokens, noised count, span lengths): spans of Poisson lengths covering
    round(mask_ratio * n) tokens at random places (never adjacent), each written as one
    <mask> (or, with probability random_ratio, one random token)."""
    n = tokens.size
    target = int(round(mask_ratio * n))
    if target == 0:
        return tokens.copy(), 0, []
    lengths, total = [], 0
    while total < target and len(lengths) < target:  # at most `target` spans: never longer
        length = min(int(rng.poisson(poisson_lambda)), target - total)
        lengths.append(length)
        total += length
    if total < target:
        lengths[-1] += target - total
    kept = n - target
    if len(lengths) - 1 > kept:  # no room to keep spans apart: fold the last ones in
        extra = sum(lengths[kept:])
        lengths = lengths[:kept + 1]
        lengths[-1] += extra
    k = len(lengths)
    free = kept - (k - 1)  # unmasked tokens beyond the one between two spans
    bars = np.sort(rng.choice(free + k, size=k, replace=False))
    gaps = np.diff(np.concatenate([[-1], bars, [free + k]])) - 1  # k + 1 parts summing to free
    gaps[1:k] += 1
    out, at = [], 0
    for i, length in enumerate(lengths):
        out.append(tokens[at:at + gaps[i]])
        at += gaps[i] + length
        fill = rng.integers(4, vocab_size) if rng.random() < random_ratio else mask_id
        out.append(np.asarray([fill], tokens.dtype))
    out.append(tokens[at:])
    return np.concatenate(out).astype(np.int32), target, lengths


class BartDenoising(seq2seq.PerTargetToken):
    flops_formula = ("3 * 2 * (L_enc * S * (4*d^2 + 2*d*mlp + 2*S*d) + L_dec * "
                     "(S * (6*d^2 + 4*S*d + 2*d*mlp) + S * 2*d^2) + S*d*V) / S")

    def __init__(self, cfg, tokenizer):
        self.cfg = cfg
        self.model = bart.Bart(cfg.model)
        if tokenizer is not None:
            tokenizer = bpe.roberta_ids(tokenizer)  # GPT-2's files in fairseq's layout
            for name in ("cls_id", "sep_id", "mask_id"):
                if getattr(tokenizer, name) < 0:
                    raise UserError(f"tokenizer {tokenizer.path} has no {name[:-3]} token "
                                    "(BART needs <s>, </s> and <mask>)")
            if tokenizer.vocab_size > cfg.model.vocab_size:
                raise UserError(f"tokenizer {tokenizer.path} has {tokenizer.vocab_size} ids; "
                                f"model.vocab_size={cfg.model.vocab_size}")
        self.tokenizer = tokenizer
        self.corpus = corpus.Corpus(cfg, tokenizer)

    def describe(self, phase) -> dict:
        return {"inputs_length": phase.seq_len, "targets_length": phase.seq_len}

    # ---- data -------------------------------------------------------------
    def examples(self, files, phase, train: bool) -> list:
        return self.corpus.examples(self, files, phase, train)

    def examples_from_documents(self, docs, phase, train: bool, group: int = 0) -> list:
        """Rows: examples of whole sentences of one document, packed first-fit."""
        room = phase.seq_len - 2
        examples = []
        for doc in docs:
            sentences, used = [], 0
            for s in doc:
                s = np.asarray(s, np.int32)[:room]
                if sentences and used + s.size > room:
                    examples.append(sentences)
                    sentences, used = [], 0
                if s.size:
                    sentences.append(s)
                    used += s.size
            if sentences:
                examples.append(sentences)
        examples = [{"tokens": np.concatenate(x),
                     "sentence_lengths": np.asarray([s.size for s in x], np.int32)}
                    for x in examples]
        sizes = [(x["tokens"].size + 2,) * 2 for x in examples]
        plan = packing.plan_rows(sizes, (phase.seq_len, phase.seq_len))
        return [[examples[i] for i in row] for row in plan]

    def noise(self, example, rng):
        """(encoder tokens, decoder targets, counts) of one example."""
        d, tok = self.cfg.data, self.tokenizer
        tokens, lengths = np.asarray(example["tokens"]), np.asarray(example["sentence_lengths"])
        bounds = np.concatenate([[0], np.cumsum(lengths)])
        order = rng.permutation(len(lengths)) if d.permute_sentence_ratio > 0 else \
            np.arange(len(lengths))
        shuffled = np.concatenate([tokens[bounds[i]:bounds[i + 1]] for i in order])
        noised, count, spans = infill(shuffled, rng, d.mask_ratio, d.poisson_lambda,
                                      tok.mask_id, d.mask_random_ratio, tok.vocab_size)
        frame = lambda x: np.concatenate([[tok.cls_id], x, [tok.sep_id]]).astype(np.int32)  # noqa
        permuted = int(len(lengths) > 1 and np.any(order != np.arange(len(lengths))))
        return frame(noised), frame(tokens), (count, len(spans), permuted, int(len(lengths) > 1))

    def transform(self, phase, train: bool):
        length = phase.seq_len

        def fn(row, rng):
            noised = [self.noise(example, rng) for example in row]
            enc, enc_seg, enc_pos = packing.pack_feature([x[0] for x in noised], length)
            dec, dec_seg, dec_pos = packing.pack_feature([x[1] for x in noised], length)
            counts = np.asarray([x[2] for x in noised], np.int32).sum(axis=0)
            return {"encoder_input_tokens": enc, "encoder_segment_ids": enc_seg,
                    "encoder_positions": enc_pos, "decoder_target_tokens": dec,
                    "decoder_input_tokens": packing.shift_right_by_segment(
                        dec, dec_seg, start_id=self.tokenizer.sep_id),
                    "decoder_segment_ids": dec_seg, "decoder_positions": dec_pos,
                    "decoder_loss_weights": (dec_seg > 0).astype(np.float32),
                    "noise_counts": counts}
        return fn

    def example_batch(self, batch_size: int, phase) -> dict:
        out = {name: np.ones((batch_size, phase.seq_len),
                             np.float32 if name == "decoder_loss_weights" else np.int32)
               for name in seq2seq.FEATURES}
        out["noise_counts"] = np.zeros((batch_size, _COUNTS), np.int32)
        return out

    # ---- loss: per target token, as T5's ---------------------------------
    def loss_sums(self, outputs, batch) -> dict:
        return seq2seq.cross_entropy_sums(
            outputs["logits"], batch["decoder_target_tokens"], batch["decoder_loss_weights"], 0.0)

    def flops_per_token(self, phase) -> float:
        return bart.flops_per_example(self.cfg.model, phase.seq_len, phase.seq_len) / phase.seq_len

    # ---- statistics (python -m pretrainx.data --stats / --show) ------------
    token_features = ("encoder_input_tokens", "decoder_target_tokens")

    def decode(self, ids) -> str:
        """Text with each <mask> written out (decoding drops special ids)."""
        parts, piece = [], []
        for i in np.asarray(ids).tolist():
            if i == self.tokenizer.mask_id:
                parts += [self.tokenizer.decode(piece), "<mask>"]
                piece = []
            elif i not in (self.tokenizer.cls_id, self.tokenizer.sep_id):
                piece.append(i)
        return "".join(parts + [self.tokenizer.decode(piece)])

    def show(self, batch, count: int) -> list:
        return seq2seq.show_segments(batch, count, self.decode,
                                             ("noised:  ", "original:"))

    def batch_stats(self, batch) -> dict:
        counts = np.asarray(batch["noise_counts"]).sum(axis=0)
        real_dec = int((batch["decoder_segment_ids"] > 0).sum())
        examples = int(sum(len(set(r[r > 0].tolist())) for r in batch["decoder_segment_ids"]))
        return {"real_tokens": int((batch["encoder_segment_ids"] > 0).sum()) + real_dec,
                "all_tokens": batch["encoder_input_tokens"].size * 2,
                "rows": batch["encoder_input_tokens"].shape[0], "examples": examples,
                "original_tokens": real_dec - 2 * examples,
                "noise_tokens": int(counts[0]), "noise_spans": int(counts[1]),
                "permuted": int(counts[2]), "permutable": int(counts[3])}

    def summarize_stats(self, totals, phase) -> dict:
        return {"mask_ratio": totals["noise_tokens"] / max(totals["original_tokens"], 1),
                "mean_span_length": totals["noise_tokens"] / max(totals["noise_spans"], 1),
                "permuted_fraction": totals["permuted"] / max(totals["examples"], 1),
                "permutable_fraction": totals["permutable"] / max(totals["examples"], 1)}
