"""RoBERTa's objective (Liu et al. 2019): masked LM only, on FULL-SENTENCES rows.

Rows are packed once: whole sentences taken contiguously, in a (shuffled)
document order, until the next one would not fit in seq_len - 2 tokens; a
document boundary inside a row is marked by a </s> between the documents, and
every row reads <s> ... </s> (section 4.2, FULL-SENTENCES). A sentence longer
than a row is cut. Masks are drawn at batch time from an RNG keyed by the
row's global position (the pipeline's random_map), so a row seen again in a
later epoch gets a new mask: RoBERTa's dynamic masking, without BERT's ten
static copies. 15% of the non-special tokens are chosen; of those 80% become
<mask>, 10% a random token, 10% stay (objectives/mlm.py). No NSP.
"""

import jax.numpy as jnp
import numpy as np

from pretrainx.data import bpe, corpus
from pretrainx.errors import UserError
from pretrainx.models import bert
from pretrainx.objectives import mlm


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


class RobertaMlm:
    flops_formula = ("3 * (L * (2*(4*h^2 + 2*h*mlp) + 4*seq*h) "
                     "+ P*2*(h^2 + h*V) / seq), P = max_predictions_per_seq")
    cross_documents = True  # FULL-SENTENCES; SpanBERT's rows stay in one document

    def __init__(self, cfg, tokenizer):
        self.cfg = cfg
        self.model = self.make_model(cfg.model)
        if tokenizer is not None:
            tokenizer = self.ids_of(tokenizer)
            if tokenizer.mask_id < 0:
                raise UserError(f"tokenizer {tokenizer.path} has no mask token")
            if tokenizer.vocab_size > cfg.model.vocab_size:
                raise UserError(f"tokenizer {tokenizer.path} has {tokenizer.vocab_size} ids "
                                f"here but model.vocab_size={cfg.model.vocab_size}")
        self.tokenizer = tokenizer
        self.corpus = corpus.Corpus(cfg, tokenizer)

    def make_model(self, model_cfg):
        return bert.BertForMaskedLM(model_cfg)

    def ids_of(self, tokenizer):
        """GPT-2's vocabulary takes RoBERTa's layout (<s> <pad> </s> <unk> first, <mask>)."""
        return bpe.roberta_ids(tokenizer)

    def describe(self, phase) -> dict:
        return {"max_predictions_per_seq": phase.max_predictions}

    # ---- data -------------------------------------------------------------
    def examples(self, files, phase, train: bool) -> list:
        return self.corpus.examples(self, files, phase, train)

    def examples_from_documents(self, docs, phase, train: bool, group: int = 0) -> list:
        """<s> row </s> of whole sentences (see pack_sentences); documents shuffled for
        training, so a row joins different neighbours in every run seed."""
        key = [self.cfg.seed, phase.seq_len, int(train)] + ([group] if group else [])
        order = np.random.default_rng(key).permutation(len(docs)) if train else range(len(docs))
        tok = self.tokenizer
        separator = tok.sep_id if self.cross_documents else None
        rows = pack_sentences([docs[d] for d in order], phase.seq_len - 2, separator)
        bos, eos = np.array([tok.cls_id], np.int32), np.array([tok.sep_id], np.int32)
        return [{"input_ids": np.concatenate([bos, r, eos])} for r in rows]

    def _padded(self, example, seq_len):
        ids = example["input_ids"]
        padded = np.full(seq_len, self.tokenizer.pad_id, np.int32)
        padded[:ids.size] = ids
        attention = np.zeros(seq_len, np.int32)
        attention[:ids.size] = 1
        return padded, attention

    def transform(self, phase, train: bool):
        """(row, rng) -> padded row with a fresh mask (dynamic masking)."""
        tok, data = self.tokenizer, self.cfg.data
        specials = tok.special_ids()
        seq_len, max_pred = phase.seq_len, phase.max_predictions

        def fn(example, rng):
            padded, attention = self._padded(example, seq_len)
            masked = mlm.mask_tokens(padded, rng, vocab_size=tok.vocab_size, mask_id=tok.mask_id,
                                     special_ids=specials, max_predictions=max_pred,
                                     mask_prob=data.mask_prob)
            return dict(masked, token_type_ids=np.zeros(seq_len, np.int32),
                        attention_mask=attention)

        return fn

    def example_batch(self, batch_size: int, phase) -> dict:
        b, s, p = batch_size, phase.seq_len, phase.max_predictions
        return {
            "input_ids": np.zeros((b, s), np.int32),
            "token_type_ids": np.zeros((b, s), np.int32),
            "attention_mask": np.ones((b, s), np.int32),
            "masked_lm_positions": np.zeros((b, p), np.int32),
            "masked_lm_ids": np.zeros((b, p), np.int32),
            "masked_lm_weights": np.zeros((b, p), np.float32),
        }

    # ---- loss -------------------------------------------------------------
    def loss_sums(self, outputs, batch) -> dict:
        return mlm.mlm_loss_and_metrics(outputs["mlm_logits"], batch["masked_lm_ids"],
                                        batch["masked_lm_weights"])

    def normalizers(self, batch) -> dict:
        return {"mlm": jnp.maximum(jnp.sum(batch["masked_lm_weights"]), 1.0)}

    def loss(self, sums, norms):
        """Mean cross-entropy over the real masked positions of the global batch."""
        return sums["mlm_loss_sum"] / norms["mlm"]

    def metrics(self, sums, norms) -> dict:
        return {"mlm_loss": sums["mlm_loss_sum"] / norms["mlm"],
                "mlm_accuracy": sums["mlm_correct_sum"] / norms["mlm"]}

    def eval_metrics(self, totals) -> dict:
        n = max(float(totals["mlm_weight_sum"]), 1.0)
        loss = float(totals["mlm_loss_sum"]) / n
        return {"loss": loss, "mlm_loss": loss,
                "mlm_accuracy": float(totals["mlm_correct_sum"]) / n}

    def flops_per_token(self, phase) -> float:
        m = self.cfg.model
        h, n = m.hidden_size, m.num_layers
        per_layer = 2 * (4 * h * h + 2 * h * m.mlp_dim) + 2 * 2 * phase.seq_len * h
        head = phase.max_predictions * 2 * (h * h + h * m.vocab_size)
        return 3.0 * (n * per_layer + head / phase.seq_len)

    # ---- statistics (python -m pretrainx.data --stats) ----------------------
    token_features = ("input_ids",)

    def batch_stats(self, batch) -> dict:
        ids = batch["input_ids"]
        real = batch["attention_mask"] > 0
        counts = mlm.masking_counts(batch, self.tokenizer.mask_id, self.tokenizer.special_ids())
        # </s> inside a row (not its last real token) is a document boundary.
        last = real.sum(axis=1) - 1
        inner = (mlm.unmasked_ids(batch) == self.tokenizer.sep_id) & real
        inner[np.arange(ids.shape[0]), last] = False
        boundaries = inner.sum(axis=1)
        return {**counts, "examples": int(ids.shape[0] + boundaries.sum()),
                "rows_crossing_documents": int((boundaries > 0).sum()),
                "full_rows": int((real.sum(axis=1) >= 0.95 * ids.shape[1]).sum())}

    def summarize_stats(self, totals, phase) -> dict:
        masked = max(totals["masked"], 1)
        rows = max(totals["rows"], 1)
        return {"masked_fraction": totals["masked"] / max(totals["candidates"], 1),
                "mask_token_fraction": totals["mask_token"] / masked,
                "random_token_fraction": totals["random"] / masked,
                "kept_fraction": totals["kept"] / masked,
                "rows_crossing_documents_fraction": totals["rows_crossing_documents"] / rows,
                "rows_at_least_95pct_full_fraction": totals["full_rows"] / rows,
                "max_predictions_per_seq": phase.max_predictions}

    def show(self, batch, count: int) -> list:
        texts = []
        tok = self.tokenizer
        for row in range(min(count, batch["input_ids"].shape[0])):
            n = int(batch["attention_mask"][row].sum())
            ids = batch["input_ids"][row][:n]
            chosen = batch["masked_lm_weights"][row] > 0
            originals = [tok.id_to_piece(int(i)) for i in batch["masked_lm_ids"][row][chosen]]
            texts.append(f"--- row {row}\n" + " ".join(tok.id_to_piece(int(i)) for i in ids)
                         + f"\nmasked originals: {' '.join(originals)}")
        return texts
