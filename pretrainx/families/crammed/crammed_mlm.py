"""The crammed BERT's objective (Geiping and Goldstein 2022; their bert-o4 training
config): masked LM only, 25% of tokens, on rows of 128 that run on across documents,
no dropout, AdamW (b2 0.98, eps 1e-12) at 1e-3 with gradients clipped at 0.5, the
one-cycle triangle over a wall-clock budget, and the batch ramped by accumulation
from one micro-batch of 128 rows to 8,192 rows at 60% of the budget.

Rows are RoBERTa's FULL-SENTENCES (objectives/rows.py: whole sentences to the row's
end, a [SEP] between documents); theirs are the tokenizer's stream cut every 128
tokens. What else differs is in docs/recipes.md#crammed-bert.
"""

from pretrainx.data import corpus
from pretrainx.families.crammed import model as crammed
from pretrainx.objectives import assembled, encoder, rows


class CrammedMlm(assembled.Assembled):
    flops_formula = ("3 * (L * (2*(4*h^2 + 3*h*mlp) + 4*seq*h) + P*2*h*V / seq), "
                     "P = max_predictions_per_seq")

    def __init__(self, cfg, tokenizer):
        if tokenizer is not None:
            encoder.check_row_tokenizer(tokenizer, cfg, "the crammed BERT", "[CLS] text [SEP]")
        super().__init__(cfg, tokenizer, crammed.CrammedForMaskedLM(cfg.model),
                         corpus.Corpus(cfg, tokenizer),
                         data=rows.FullSentencesRows(cfg, tokenizer), losses=encoder.MlmLoss())

    def describe(self, phase) -> dict:
        o = self.cfg.optimizer
        return {"max_predictions_per_seq": phase.max_predictions,
                "budget_hours": o.budget_hours}

    def transform(self, phase, train: bool):
        """Rows masked at data.mask_prob, or for eval at data.eval_mask_prob when set (so
        that recipes trained at other rates compare at one: benchmarks/recipes.py)."""
        data = self.cfg.data
        if not train and data.eval_mask_prob:
            data = data.copy_and_resolve_references()
            data.mask_prob = data.eval_mask_prob
        return self.data.transform(phase, train, data)

    def flops_per_token(self, phase) -> float:
        return crammed.flops_per_token(self.cfg.model, phase.seq_len, phase.max_predictions)
