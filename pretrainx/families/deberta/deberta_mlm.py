"""DeBERTa's masked-LM objective (He et al. 2021, the v1/v2 recipe): dynamic masking
(15%, 80/10/10) of FULL-SENTENCES rows, and the enhanced mask decoder between the
encoder and the MLM head (families/deberta/model.py). DeBERTa-v3's replaced-token detection is
the family's other objective; this one is for a user who wants MLM.

The paper's base recipe: 1M steps of 2K rows of 512 tokens, Adam (eps 1e-6, b2 0.999)
at 2e-4 with 10K warmup steps and linear decay, weight decay 0.01, gradients clipped
at 1, dropout 0.1; the v2 vocabulary (128K SentencePiece pieces).
"""

from pretrainx import objectives
from pretrainx.errors import UserError
from pretrainx.families.deberta import model as deberta
from pretrainx.objectives import encoder, rows


class DebertaMlm(rows.FullSentencesRows, encoder.MlmLoss):
    flops_formula = ("3 * (L * (2*(4*h^2 + 2*h*mlp) + 4*seq*h + 2*2*seq*2B*h) "
                     "+ 2 x the last layer (EMD) + P*2*(h^2 + h*V)/seq), B = position_buckets")

    def __init__(self, cfg, tokenizer):
        self.cfg, self.tokenizer = cfg, tokenizer
        self.model = deberta.DebertaForMaskedLM(cfg.model)
        self.corpus = encoder.masked_corpus(cfg, tokenizer, vocab_must_fit=True)

    def describe(self, phase) -> dict:
        return {"max_predictions_per_seq": phase.max_predictions}

    def flops_per_token(self, phase) -> float:
        """DeBERTa's layers (families/deberta/model.py: flops_per_layer), the EMD's two extra passes
        of the last layer, and the head at the predicted rows."""
        m, s = self.cfg.model, phase.seq_len
        layer = deberta.flops_per_layer(m, s)
        emd = 2 * layer if m.enhanced_mask_decoder else 0
        h = m.hidden_size
        head = phase.max_predictions * 2 * (h * h + h * m.vocab_size) / s
        return 3.0 * (m.num_layers * layer + emd + head)


def paper_defaults(objective: str, model):
    """DeBERTa's pretraining settings, which both of the family's objectives use: the
    base shape (`model`), 1M steps of 2K rows of 512 tokens, Adam (eps 1e-6) at 2e-4
    after 10K warmup steps, linear decay, gradients clipped at 1, cased text, 80
    predictions."""
    return encoder.defaults(
        objective, model, total_steps=1_000_000, batch=2048, seq_len=512,
        learning_rate=2e-4, warmup_steps=10_000, schedule="warmup_linear", eps=1e-6,
        grad_clip=1.0, lower_case=False,
        max_predictions=80)  # 15% of 510 is at most 77: never binds


def defaults():
    """DeBERTa-base's MLM recipe (the paper's table 8, v2's vocabulary), with the EMD."""
    return paper_defaults("deberta_mlm", deberta.default_config(enhanced_mask_decoder=True))


def validate(cfg) -> None:
    """Checks for both of the family's objectives."""
    encoder.validate(cfg)
    if cfg.model.scan_layers or cfg.model.remat != "none":
        raise UserError("model.scan_layers and model.remat are not built for DeBERTa yet: "
                        "leave them False and none")


objectives.register(objectives.Entry(name="deberta_mlm", build=DebertaMlm, defaults=defaults,
                                     validate=validate, as_pretrained=encoder.pretrained_mlm))
