"""The crammed BERT's objective (Geiping and Goldstein 2022; their bert-o4 training
config): masked LM only, 25% of tokens, on rows of 128 that run on across documents,
no dropout, AdamW (b2 0.98, eps 1e-12) at 1e-3 with gradients clipped at 0.5, the
one-cycle triangle over a wall-clock budget, and the batch ramped by accumulation
from one micro-batch of 128 rows to 8,192 rows at 60% of the budget.

Rows are RoBERTa's FULL-SENTENCES (objectives/rows.py: whole sentences to the row's
end, a [SEP] between documents); theirs are the tokenizer's stream cut every 128
tokens. What else differs is in docs/recipes.md#crammed-bert.
"""

from pretrainx import config as config_lib
from pretrainx import objectives
from pretrainx.data import corpus
from pretrainx.errors import UserError
from pretrainx.families.crammed import model as crammed
from pretrainx.objectives import encoder, rows


class CrammedMlm(rows.FullSentencesRows, encoder.MlmLoss):
    flops_formula = ("3 * (L * (2*(4*h^2 + 3*h*mlp) + 4*seq*h) + P*2*h*V / seq), "
                     "P = max_predictions_per_seq")

    def __init__(self, cfg, tokenizer):
        self.cfg = cfg
        self.model = crammed.CrammedForMaskedLM(cfg.model)
        if tokenizer is not None:
            encoder.check_row_tokenizer(tokenizer, cfg, "the crammed BERT", "[CLS] text [SEP]")
        self.tokenizer = tokenizer
        self.corpus = corpus.Corpus(cfg, tokenizer)

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
        return rows.full_sentences_transform(self.tokenizer, data, phase)

    def flops_per_token(self, phase) -> float:
        return crammed.flops_per_token(self.cfg.model, phase.seq_len, phase.max_predictions)


def defaults():
    """bert-o4 with crammed-bert: a day on one GPU (budget 24 hours)."""
    model = crammed.default_config(
        dropout_rate=0.0, attention_dropout_rate=0.0)  # pretrain_in_train_mode False
    c = encoder.defaults(
        "crammed", model,
        total_steps=900_000,  # micro-batch steps: the schedule's resolution and upper bound
        batch=128, seq_len=128,  # the micro-batch; updates take accumulate_to
        learning_rate=1e-3, b2=0.98, eps=1e-12, weight_decay=0.01, grad_clip=0.5,
        warmup_steps=0, schedule="one_cycle", cycle_start=0.25, cycle_falloff=0.25,
        budget_hours=24.0,
        accumulate_to=64,  # 64 x 128 = their batch of 8,192
        batch_ramp=0.6,  # the full batch at 60% of the budget
        mask_prob=0.25,
        max_predictions=32)  # 25% of 126 rounds to at most 32
    c.data.eval_mask_prob = 0.0  # 0: evaluate at mask_prob
    return c


def validate(cfg) -> None:
    encoder.validate(cfg)
    o = cfg.optimizer
    if not 0 <= o.cycle_start <= 1 or not 0 < o.cycle_falloff < 1:
        raise UserError(f"optimizer.cycle_start={o.cycle_start} must be in [0, 1] and "
                        f"optimizer.cycle_falloff={o.cycle_falloff} in (0, 1)")
    config_lib.check_positive(cfg, "data.max_predictions_per_seq")
    if cfg.data.eval_mask_prob:  # 0 (the recipe's default): evaluate at data.mask_prob
        config_lib.check_fraction(cfg, "data.eval_mask_prob", 0.0, 1.0)


objectives.register(objectives.Entry(name="crammed", build=CrammedMlm, defaults=defaults,
                                     validate=validate, as_pretrained=encoder.pretrained_mlm))
