"""T5 span-corruption pretraining: T5's data recipe, packed rows, per-token loss.

Data, as t5.data.preprocessors.span_corruption and seqio build it: each document
is tokenized (a random chunk of at most `max_doc_tokens` kept), documents are
concatenated `docs_per_concat` at a time and split into raw examples of the
length `random_spans_helper` gives, and at batch time (a fresh draw every epoch)
each example is span-corrupted and packed with others into rows of exactly
`seq_len` inputs and `targets_length` targets.
"""

import numpy as np

from pretrainx.data import corpus, packing
from pretrainx.errors import UserError
from pretrainx.families.t5 import model as t5
from pretrainx.objectives import seq2seq, spans

class SpanCorruption(seq2seq.PerTargetToken):
    flops_formula = ("3 * 2 * (L_enc * S_in * (4*d*inner + ff + 2*S_in*inner) + L_dec * "
                     "(S_tgt * (6*d*inner + 2*S_tgt*inner + 2*S_in*inner + ff) + "
                     "S_in * 2*d*inner) + S_tgt*d*V) / S_in, ff = 2 or 3 (gated) * d*mlp, "
                     "inner = heads x head_dim, S_in and S_tgt the inputs' and targets' "
                     "lengths")

    def __init__(self, cfg, tokenizer):
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.model = t5.T5(cfg.model)
        self.corpus = corpus.Corpus(cfg, tokenizer)
        data = cfg.data
        if tokenizer is not None:
            total = tokenizer.vocab_size + data.num_sentinels
            if total > cfg.model.vocab_size:
                raise UserError(
                    f"tokenizer {tokenizer.path} has {tokenizer.vocab_size} ids; with "
                    f"{data.num_sentinels} sentinels that is {total} > model.vocab_size="
                    f"{cfg.model.vocab_size}")
            if tokenizer.sep_id < 0:
                raise UserError(f"tokenizer {tokenizer.path} has no EOS (or [SEP]) id")
            self.eos_id = tokenizer.sep_id
            # Counted down from the last id of the vocabulary the sentinels extend.
            self.sentinels = spans.sentinel_ids(total, data.num_sentinels)

    def lengths(self, phase):
        """(raw tokens per example, inputs length, targets length)."""
        raw, targets = spans.random_spans_helper(phase.seq_len, self.cfg.data.noise_density,
                                                 self.cfg.data.mean_noise_span_length)
        return raw, phase.seq_len, targets

    def describe(self, phase) -> dict:
        raw, inputs, targets = self.lengths(phase)
        return {"raw_tokens_per_example": raw, "inputs_length": inputs,
                "targets_length": targets}

    # ---- data -------------------------------------------------------------
    def examples(self, files, phase, train: bool) -> list:
        return self.corpus.examples(self, files, phase, train)

    def joined_streams(self, docs, phase, train: bool, rng) -> list:
        """T5's select_random_chunk -> reduce_concat_tokens: documents (a random chunk of
        at most max_doc_tokens of each) joined `docs_per_concat` at a time."""
        data = self.cfg.data
        docs = [np.concatenate(doc) if len(doc) else np.zeros(0, np.int32) for doc in docs]
        order = rng.permutation(len(docs)) if train else np.arange(len(docs))
        out = []
        for group_start in range(0, len(order), data.docs_per_concat):
            chunks = []
            for d in order[group_start:group_start + data.docs_per_concat]:
                doc = docs[d]
                if doc.size > data.max_doc_tokens:
                    num_chunks = -(-doc.size // data.max_doc_tokens)
                    start = rng.integers(0, num_chunks) * data.max_doc_tokens
                    doc = doc[start:start + data.max_doc_tokens]
                chunks.append(doc)
            out.append(np.concatenate(chunks) if chunks else np.zeros(0, np.int32))
        return out

    def plan_rng(self, phase, train: bool, group: int):
        key = [self.cfg.seed, phase.seq_len, int(train)] + ([group] if group else [])
        return np.random.default_rng(key)

    def raw_examples(self, docs, phase, train: bool, group: int = 0) -> list:
        """T5's select_random_chunk -> reduce_concat_tokens -> split_tokens."""
        raw_length, _, _ = self.lengths(phase)
        out = []
        for joined in self.joined_streams(docs, phase, train, self.plan_rng(phase, train, group)):
            out.extend(joined[i:i + raw_length] for i in range(0, joined.size, raw_length))
        return [x for x in out if x.size]

    def examples_from_documents(self, docs, phase, train: bool, group: int = 0) -> list:
        """Rows: the raw examples that share one packed row, planned from their lengths."""
        raw = self.raw_examples(docs, phase, train, group)
        _, inputs_length, targets_length = self.lengths(phase)
        d = self.cfg.data
        sizes = [spans.corrupted_lengths(x.size, d.noise_density, d.mean_noise_span_length)
                 for x in raw]
        plan = packing.plan_rows(sizes, (inputs_length, targets_length))
        return [[raw[i] for i in row] for row in plan]

    def corrupt(self, tokens, rng):
        d = self.cfg.data
        return spans.span_corrupt(tokens, rng, noise_density=d.noise_density,
                                  mean_noise_span_length=d.mean_noise_span_length,
                                  sentinels=self.sentinels, eos_id=self.eos_id)

    def pack(self, pairs, phase) -> dict:
        """[(inputs, targets), ...] -> one packed row of every feature."""
        _, inputs_length, targets_length = self.lengths(phase)
        enc, enc_seg, enc_pos = packing.pack_feature([p[0] for p in pairs], inputs_length)
        dec, dec_seg, dec_pos = packing.pack_feature([p[1] for p in pairs], targets_length)
        return {
            "encoder_input_tokens": enc, "encoder_segment_ids": enc_seg,
            "encoder_positions": enc_pos,
            "decoder_target_tokens": dec,
            "decoder_input_tokens": packing.shift_right_by_segment(dec, dec_seg),
            "decoder_segment_ids": dec_seg, "decoder_positions": dec_pos,
            "decoder_loss_weights": (dec_seg > 0).astype(np.float32),
        }

    def transform(self, phase, train: bool):
        def fn(row, rng):
            return self.pack([self.corrupt(tokens, rng) for tokens in row], phase)
        return fn

    def example_batch(self, batch_size: int, phase) -> dict:
        _, inputs_length, targets_length = self.lengths(phase)
        out = {}
        for name in seq2seq.FEATURES:
            length = inputs_length if name.startswith("encoder") else targets_length
            dtype = np.float32 if name == "decoder_loss_weights" else np.int32
            out[name] = np.ones((batch_size, length), dtype)
        return out

    # ---- loss -------------------------------------------------------------
    def loss_sums(self, outputs, batch) -> dict:
        return seq2seq.cross_entropy_sums(outputs["logits"], batch["decoder_target_tokens"],
                                  batch["decoder_loss_weights"], self.cfg.z_loss)

    def flops_symbols(self, phase) -> dict:
        m = self.cfg.model
        _, inputs_length, targets_length = self.lengths(phase)
        return {"S_in": inputs_length, "S_tgt": targets_length,
                "inner": m.num_heads * m.head_dim,
                "ff": (3 if t5.is_gated(m) else 2) * m.hidden_size * m.mlp_dim}

    def flops_per_token(self, phase) -> float:
        """Per input token, so that the loop's tokens/s (inputs) x this = FLOPs/s."""
        _, inputs_length, targets_length = self.lengths(phase)
        return t5.flops_per_example(self.cfg.model, inputs_length,
                                    targets_length) / inputs_length

    # ---- statistics (python -m pretrainx.data --stats) ----------------------
    token_features = ("encoder_input_tokens", "decoder_target_tokens")

    def decode(self, ids) -> str:
        """Text with sentinels written <extra_id_N>, as T5 prints them."""
        out, piece = [], []
        for i in np.asarray(ids).tolist():
            if i >= self.tokenizer.vocab_size:
                out.append(self.tokenizer.decode(piece))
                out.append(f"<extra_id_{int(self.sentinels[0]) - i}>")
                piece = []
            elif i == self.eos_id:
                out.append(self.tokenizer.decode(piece) + "</s>")
                piece = []
            else:
                piece.append(i)
        out.append(self.tokenizer.decode(piece))
        return " ".join(p for p in out if p)

    def show(self, batch, count: int) -> list:
        return seq2seq.show_segments(batch, count, self.decode, ("inputs: ", "targets:"))

    def batch_stats(self, batch) -> dict:
        """Sums over a batch of what `python -m pretrainx.data --stats` reports."""
        enc, dec = batch["encoder_input_tokens"], batch["decoder_target_tokens"]
        sentinel = (dec >= self.sentinels.min()) & (dec <= self.sentinels.max())
        real_dec = batch["decoder_segment_ids"] > 0
        eos = (dec == self.eos_id) & real_dec
        noise = real_dec & ~sentinel & ~eos
        examples = int(sum(len(set(r[r > 0].tolist())) for r in batch["encoder_segment_ids"]))
        inputs_real = int((batch["encoder_segment_ids"] > 0).sum())
        return {"real_tokens": inputs_real + int(real_dec.sum()),
                "all_tokens": enc.size + dec.size,
                "rows": enc.shape[0], "examples": examples,
                "noise_tokens": int(noise.sum()), "noise_spans": int(sentinel.sum()),
                # raw = kept (inputs minus sentinels and EOS) + noise
                "raw_tokens": int(inputs_real - sentinel.sum() - eos.sum() + noise.sum())}

    def summarize_stats(self, totals, phase) -> dict:
        _, inputs_length, targets_length = self.lengths(phase)
        return {"noise_density": totals["noise_tokens"] / max(totals["raw_tokens"], 1),
                "mean_noise_span_length": totals["noise_tokens"] / max(totals["noise_spans"], 1),
                "inputs_length": inputs_length, "targets_length": targets_length}
