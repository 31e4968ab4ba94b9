"""BERT's objective: masked LM + next sentence prediction.

Pairs are built once per `dupe_factor` pass over the corpus (as
create_pretraining_data.py does); masks are drawn at batch time from an RNG keyed
by the example's global position, so every epoch sees fresh masks and a resumed
run sees the same ones.
"""

import jax.numpy as jnp
import numpy as np

from pretrainx.data import corpus
from pretrainx.errors import UserError
from pretrainx.models import bert
from pretrainx.objectives import mlm, nsp

_PAIR_KEYS = ("input_ids", "token_type_ids", "next_sentence_label")


class MlmNsp:
    flops_formula = ("3 * (L * (2*(4*h^2 + 2*h*mlp) + 4*seq*h) "
                     "+ (P*2*(h^2 + h*V) + 2*(h^2 + 2*h)) / seq), P = max_predictions_per_seq")

    def __init__(self, cfg, tokenizer):
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.model = bert.BertForPreTraining(cfg.model)
        self.corpus = corpus.Corpus(cfg, tokenizer)
        if tokenizer is not None and tokenizer.mask_id < 0:
            raise UserError(f"tokenizer {tokenizer.path} has no [MASK] token")

    def describe(self, phase) -> dict:
        return {"max_predictions_per_seq": phase.max_predictions}

    # ---- data -------------------------------------------------------------
    def examples(self, files, phase, train: bool) -> list:
        return self.corpus.examples(self, files, phase, train)

    def examples_from_documents(self, docs, phase, train: bool, group: int = 0) -> list:
        """NSP pairs for `phase.seq_len`; `dupe_factor` independent pairings for training."""
        tok = self.tokenizer
        return mlm.pairings(
            self.cfg, phase, train, group,
            lambda rng: nsp.create_pair_examples(docs, phase.seq_len, self.cfg.data.short_seq_prob,
                                                 rng, tok.cls_id, tok.sep_id), _PAIR_KEYS)

    def transform(self, phase, train: bool):
        """(pair, rng) -> padded, masked example of length phase.seq_len."""
        tok, data = self.tokenizer, self.cfg.data
        specials = tok.special_ids()
        seq_len, max_pred = phase.seq_len, phase.max_predictions

        def fn(example, rng):
            padded, types, attention = mlm.pad_pair(example, seq_len, tok.pad_id)
            starts = tok.word_start_mask(padded) if data.whole_word_masking else None
            masked = mlm.mask_tokens(padded, rng, vocab_size=tok.vocab_size, mask_id=tok.mask_id,
                                     special_ids=specials, max_predictions=max_pred,
                                     mask_prob=data.mask_prob, word_starts=starts)
            return dict(masked, token_type_ids=types, attention_mask=attention,
                        next_sentence_label=np.int32(example["next_sentence_label"]))

        return fn

    def example_batch(self, batch_size: int, phase) -> dict:
        """Zeros of the batch's shapes and dtypes (for init and compilation)."""
        b, s, p = batch_size, phase.seq_len, phase.max_predictions
        return {
            "input_ids": np.zeros((b, s), np.int32),
            "token_type_ids": np.zeros((b, s), np.int32),
            "attention_mask": np.ones((b, s), np.int32),
            "masked_lm_positions": np.zeros((b, p), np.int32),
            "masked_lm_ids": np.zeros((b, p), np.int32),
            "masked_lm_weights": np.zeros((b, p), np.float32),
            "next_sentence_label": np.zeros((b,), np.int32),
        }

    # ---- loss -------------------------------------------------------------
    def loss_sums(self, outputs, batch) -> dict:
        sums = mlm.mlm_loss_and_metrics(outputs["mlm_logits"], batch["masked_lm_ids"],
                                        batch["masked_lm_weights"])
        sums.update(nsp.nsp_loss_and_metrics(outputs["nsp_logits"], batch["next_sentence_label"]))
        return sums

    def normalizers(self, batch) -> dict:
        """Global-batch denominators: real masked positions and examples."""
        return {"mlm": jnp.maximum(jnp.sum(batch["masked_lm_weights"]), 1.0),
                "nsp": jnp.asarray(batch["next_sentence_label"].shape[0], jnp.float32)}

    def loss(self, sums, norms):
        """Mean MLM cross-entropy over real masked positions + mean NSP cross-entropy."""
        return sums["mlm_loss_sum"] / norms["mlm"] + sums["nsp_loss_sum"] / norms["nsp"]

    def metrics(self, sums, norms) -> dict:
        return {
            "mlm_loss": sums["mlm_loss_sum"] / norms["mlm"],
            "mlm_accuracy": sums["mlm_correct_sum"] / norms["mlm"],
            "nsp_loss": sums["nsp_loss_sum"] / norms["nsp"],
            "nsp_accuracy": sums["nsp_correct_sum"] / norms["nsp"],
        }

    def eval_metrics(self, totals) -> dict:
        mlm_n = max(float(totals["mlm_weight_sum"]), 1.0)
        nsp_n = max(float(totals["nsp_count"]), 1.0)
        out = {
            "mlm_loss": float(totals["mlm_loss_sum"]) / mlm_n,
            "mlm_accuracy": float(totals["mlm_correct_sum"]) / mlm_n,
            "nsp_loss": float(totals["nsp_loss_sum"]) / nsp_n,
            "nsp_accuracy": float(totals["nsp_correct_sum"]) / nsp_n,
        }
        out["loss"] = out["mlm_loss"] + out["nsp_loss"]
        return out

    # ---- statistics (python -m pretrainx.data --stats) ----------------------
    token_features = ("input_ids",)

    def batch_stats(self, batch) -> dict:
        counts = mlm.masking_counts(batch, self.tokenizer.mask_id, self.tokenizer.special_ids())
        return {**counts, "examples": counts["rows"],
                "is_next": int((batch["next_sentence_label"] == 0).sum())}

    def summarize_stats(self, totals, phase) -> dict:
        masked = max(totals["masked"], 1)
        return {"masked_fraction": totals["masked"] / max(totals["candidates"], 1),
                "mask_token_fraction": totals["mask_token"] / masked,
                "random_token_fraction": totals["random"] / masked,
                "kept_fraction": totals["kept"] / masked,
                "nsp_positive_fraction": totals["is_next"] / max(totals["examples"], 1),
                "max_predictions_per_seq": phase.max_predictions}

    def show(self, batch, count: int) -> list:
        texts = []
        tok = self.tokenizer
        for row in range(min(count, batch["input_ids"].shape[0])):
            n = int(batch["attention_mask"][row].sum())
            ids = batch["input_ids"][row][:n]
            chosen = batch["masked_lm_weights"][row] > 0
            originals = [tok.id_to_piece(int(i)) for i in batch["masked_lm_ids"][row][chosen]]
            label = "IsNext" if batch["next_sentence_label"][row] == 0 else "NotNext"
            texts.append(f"--- row {row} ({label})\n"
                         + " ".join(tok.id_to_piece(int(i)) for i in ids)
                         + f"\nmasked originals: {' '.join(originals)}")
        return texts

    def flops_per_token(self, phase) -> float:
        return bert.flops_per_token(self.cfg.model, phase.seq_len, phase.max_predictions)
