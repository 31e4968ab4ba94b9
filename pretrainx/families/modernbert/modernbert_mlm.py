"""ModernBERT's objective (Warner et al. 2024): masked LM only, 30% of tokens, on packed
documents.

Each document's tokens become [CLS] piece [SEP] examples of up to seq_len (a long
document several, cut anywhere), and examples are packed first-fit into rows of seq_len with segment ids and
positions that restart (`data.pack_examples`; False: one example a row, padded), as the
released model's unpadded batches hold several documents that never see each other.
Masks are drawn at batch time, keyed by the row's position: 30% of the non-special
tokens, 80/10/10, the MLM head only at the masked positions. `data.eval_mask_prob`
(0: the training rate) evaluates at another rate, so that recipes trained at 15% and at
30% can be compared at one (benchmarks/recipes.py uses 15%).
"""


import numpy as np

from pretrainx.data import corpus, packing
from pretrainx.families.modernbert import model as modernbert
from pretrainx.objectives import assembled, encoder, mlm, rows


class ModernBertMlm(assembled.Assembled):
    """Its own packed document rows and MLM's loss part (encoder.MlmLoss). Another
    encoder trained the same way (NeoBERT) names its own `network`, `flops` and
    `flops_formula`; its decoder (modernbert_clm.py) its `network` and `loss_part`."""

    title = "ModernBERT"
    network = modernbert.ModernBertForMaskedLM
    loss_part = encoder.MlmLoss
    flops = staticmethod(modernbert.flops_per_token)
    flops_formula = ("3 * (L * 2*(4*h^2 + 3*h*mlp) + 4*h*(G*seq + (L - G)*min(seq, W + 1)) "
                     "+ P*2*(h^2 + h*V) / seq), G = ceil(L / global_attn_every_n_layers) "
                     "global layers, W = local_attention")

    def __init__(self, cfg, tokenizer):
        if tokenizer is not None:
            encoder.check_row_tokenizer(tokenizer, cfg, self.title, "[CLS] text [SEP]")
        super().__init__(cfg, tokenizer, self.network(cfg.model),
                         corpus.Corpus(cfg, tokenizer), losses=self.loss_part())

    def describe(self, phase) -> dict:
        return {"max_predictions_per_seq": phase.max_predictions,
                "pack_examples": bool(self.cfg.data.pack_examples)}

    def flops_per_token(self, phase) -> float:
        return self.flops(self.cfg.model, phase.seq_len, phase.max_predictions)

    # ---- data -------------------------------------------------------------
    def examples_from_documents(self, docs, phase, train: bool, group: int = 0) -> list:
        examples = rows.document_examples(docs, self.cfg, phase, train, group, self.tokenizer)
        if self.cfg.data.pack_examples:
            return packing.pack_examples(examples, phase.seq_len)
        return [{"input_ids": e, "segment_ids": np.ones(e.size, np.int32),
                 "positions": np.arange(e.size, dtype=np.int32)} for e in examples]

    def transform(self, phase, train: bool):
        """(row, rng) -> the row padded, with segment ids, positions and a fresh mask."""
        tok, data = self.tokenizer, self.cfg.data
        rate = data.mask_prob if train or not data.eval_mask_prob else data.eval_mask_prob
        specials = tok.special_ids()
        seq_len, max_pred = phase.seq_len, phase.max_predictions

        def fn(example, rng):
            row = padded_row(example, seq_len, tok.pad_id)
            masked = mlm.mask_tokens(row["input_ids"], rng, vocab_size=tok.vocab_size,
                                     mask_id=tok.mask_id, special_ids=specials,
                                     max_predictions=max_pred, mask_prob=rate)
            return dict(row, **masked, token_type_ids=np.zeros(seq_len, np.int32))

        return fn

    def example_batch(self, batch_size: int, phase) -> dict:
        batch = encoder.example_batch(batch_size, phase)
        batch["positions"] = np.zeros_like(batch["input_ids"])
        return batch

    # ---- python -m pretrainx.data --stats / --show ---------------------------
    def batch_stats(self, batch) -> dict:
        counts = mlm.masking_counts(batch, self.tokenizer.mask_id, self.tokenizer.special_ids())
        return {**counts, "examples": int(batch["attention_mask"].max(axis=1).sum())}

    def summarize_stats(self, totals, phase) -> dict:
        return {**encoder.masking_summary(totals),
                "padding_fraction": 1 - totals["real_tokens"] / max(totals["all_tokens"], 1),
                "examples_per_row": totals["examples"] / max(totals["rows"], 1),
                "max_predictions_per_seq": phase.max_predictions}

    def show(self, batch, count: int) -> list:
        return encoder.show_rows(self.tokenizer, batch, count,
                                 label=lambda r: f"{int(batch['attention_mask'][r].max())} "
                                                 "examples")


def padded_row(example: dict, seq_len: int, pad_id: int) -> dict:
    """A packed (or single) example row padded to seq_len: input_ids, attention_mask
    (its segment ids, 0 on padding) and positions."""
    n = example["input_ids"].size
    row = {"input_ids": np.full(seq_len, pad_id, np.int32),
           "attention_mask": np.zeros(seq_len, np.int32),
           "positions": np.zeros(seq_len, np.int32)}
    row["input_ids"][:n] = example["input_ids"]
    row["attention_mask"][:n] = example["segment_ids"]
    row["positions"][:n] = example["positions"]
    return row


def schedule_in_tokens(*, seq_len: int, micro_batch: int, accumulate_to: int,
                       learning_rate: float, warmup_tokens: float, ramp_tokens: float,
                       total_tokens: float = 1.7e12, decay_tokens: float = 50e9) -> dict:
    """ModernBERT's schedule in tokens, as steps of one micro-batch of `micro_batch`
    rows: the batch warms up from one micro-batch to `accumulate_to` of them over
    `ramp_tokens` (each size taking the same number of updates, as their
    BatchSizeWarmupScheduler), and the rate's warmup and 1 - sqrt decay are counted in
    the same micro-batch steps, so in tokens (train/ramp.py). Returns the run's
    total_steps and batch, and the optimizer's keys."""
    tokens = seq_len * micro_batch
    # Their decay is decoupled from the rate (p -= 1e-5 * lr_t / lr_peak * p); optax's
    # multiplies by lr_t, so 1e-5 / peak gives the same step.
    optimizer = dict(learning_rate=learning_rate, weight_decay=1e-5 / learning_rate,
                     warmup_steps=round(warmup_tokens / tokens),
                     decay_steps=round(decay_tokens / tokens), accumulate_to=accumulate_to,
                     batch_ramp=ramp_tokens / total_tokens, batch_ramp_shape="equal_updates")
    return dict(total_steps=round(total_tokens / tokens), batch=micro_batch, **optimizer)


def token_schedule(c, **tokens):
    """`schedule_in_tokens` written into config `c` (at its seq_len): a recipe's."""
    values = schedule_in_tokens(seq_len=c.seq_len, **tokens)
    c.total_steps, c.global_batch_size = values.pop("total_steps"), values.pop("batch")
    c.optimizer.update(values)
    return c
