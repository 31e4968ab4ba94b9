"""BERT's objective: masked LM + next sentence prediction.

Pairs are built once per `dupe_factor` pass over the corpus (as
create_pretraining_data.py does); masks are drawn at batch time from an RNG keyed
by the example's global position, so every epoch sees fresh masks and a resumed
run sees the same ones.
"""

import numpy as np

from pretrainx.families.bert import model as bert
from pretrainx.objectives import encoder, mlm, nsp, packed_pairs

_PAIR_KEYS = ("input_ids", "token_type_ids", "next_sentence_label")


class MlmNsp(packed_pairs.Packing):
    flops_formula = ("3 * (L * (2*(4*h^2 + 2*h*mlp) + 4*seq*h) "
                     "+ (P*2*(h^2 + h*V) + 2*(h^2 + 2*h)) / seq), P = max_predictions_per_seq")

    def __init__(self, cfg, tokenizer):
        self.cfg, self.tokenizer = cfg, tokenizer
        self.model = bert.BertForPreTraining(cfg.model)
        self.corpus = encoder.masked_corpus(cfg, tokenizer)

    # ---- data -------------------------------------------------------------
    def examples(self, files, phase, train: bool) -> list:
        return self.corpus.examples(self, files, phase, train)

    def examples_from_documents(self, docs, phase, train: bool, group: int = 0) -> list:
        """NSP pairs for `phase.seq_len`; `dupe_factor` independent pairings for training."""
        tok = self.tokenizer
        pairs = mlm.pairings(
            self.cfg, phase, train, group,
            lambda rng: nsp.create_pair_examples(docs, phase.seq_len, self.cfg.data.short_seq_prob,
                                                 rng, tok.cls_id, tok.sep_id), _PAIR_KEYS)
        if self.packed:
            return packed_pairs.pack_pairs(pairs, phase.seq_len,
                                           self.cfg.data.max_examples_per_row)
        return pairs

    def transform(self, phase, train: bool):
        """(pair, rng) -> padded, masked example of length phase.seq_len."""
        tok, data = self.tokenizer, self.cfg.data
        specials = encoder.unmasked_specials(tok)
        seq_len, max_pred = phase.seq_len, phase.max_predictions

        def fn(example, rng):
            padded, types, attention = mlm.pad_pair(example, seq_len, tok.pad_id)
            starts = tok.word_start_mask(padded) if data.whole_word_masking else None
            masked = mlm.mask_tokens(padded, rng, vocab_size=tok.vocab_size, mask_id=tok.mask_id,
                                     special_ids=specials, max_predictions=max_pred,
                                     mask_prob=data.mask_prob, word_starts=starts)
            return dict(masked, token_type_ids=types, attention_mask=attention,
                        next_sentence_label=np.int32(example["next_sentence_label"]))

        if not self.packed:
            return fn
        return packed_pairs.packed_transform(fn, seq_len, data.max_examples_per_row, max_pred,
                                             tok.pad_id)

    def example_batch(self, batch_size: int, phase) -> dict:
        """Zeros of the batch's shapes and dtypes (for init and compilation)."""
        batch = dict(encoder.example_batch(batch_size, phase),
                     next_sentence_label=np.zeros((batch_size,), np.int32))
        if self.packed:
            batch.update(packed_pairs.example_batch_extras(
                batch_size, phase.seq_len, self.cfg.data.max_examples_per_row,
                phase.max_predictions))
        return batch

    # ---- loss -------------------------------------------------------------
    def loss_sums(self, outputs, batch) -> dict:
        sums = mlm.mlm_loss_and_metrics(outputs["mlm_logits"], batch["masked_lm_ids"],
                                        batch["masked_lm_weights"])
        sums.update(nsp.nsp_loss_and_metrics(outputs["nsp_logits"], batch["next_sentence_label"],
                                             batch.get("next_sentence_weights")))
        return sums

    def normalizers(self, batch) -> dict:
        """Global-batch denominators: real masked positions and examples."""
        return {"mlm": encoder.mlm_normalizer(batch),
                "nsp": packed_pairs.example_count(batch, "next_sentence_label")}

    def loss(self, sums, norms):
        """Mean MLM cross-entropy over real masked positions + mean NSP cross-entropy."""
        return sums["mlm_loss_sum"] / norms["mlm"] + sums["nsp_loss_sum"] / norms["nsp"]

    def metrics(self, sums, norms) -> dict:
        return {**encoder.mlm_metrics(sums, norms), **encoder.pair_metrics(sums, norms, "nsp")}

    def eval_metrics(self, totals) -> dict:
        out = {**encoder.mlm_eval_metrics(totals), **encoder.pair_eval_metrics(totals, "nsp")}
        out["loss"] = out["mlm_loss"] + out["nsp_loss"]
        return out

    # ---- statistics (python -m pretrainx.data --stats) ----------------------
    token_features = ("input_ids",)

    def batch_stats(self, batch) -> dict:
        counts = mlm.masking_counts(batch, self.tokenizer.mask_id,
                                    encoder.unmasked_specials(self.tokenizer))
        labels = batch["next_sentence_label"]
        weights = packed_pairs.real_examples(batch, "next_sentence_label")
        return {**counts, "examples": int(weights.sum()),
                "is_next": int(((labels == 0) & weights).sum())}

    def summarize_stats(self, totals, phase) -> dict:
        return {**encoder.masking_summary(totals),
                "nsp_positive_fraction": totals["is_next"] / max(totals["examples"], 1),
                "padding_fraction": 1 - totals["real_tokens"] / max(totals["all_tokens"], 1),
                "examples_per_row": totals["examples"] / max(totals["rows"], 1),
                "max_predictions_per_seq": phase.max_predictions}

    def show(self, batch, count: int) -> list:
        return encoder.show_rows(self.tokenizer, batch, count, packed_pairs.label_text(
            batch, "next_sentence_label", lambda label: "IsNext" if label == 0 else "NotNext"))

    def flops_per_token(self, phase) -> float:
        return bert.flops_per_token(self.cfg.model, phase.seq_len, phase.max_predictions)
