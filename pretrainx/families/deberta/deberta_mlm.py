"""DeBERTa's masked-LM objective (He et al. 2021, the v1/v2 recipe): dynamic masking
(15%, 80/10/10) of FULL-SENTENCES rows, and the enhanced mask decoder between the
encoder and the MLM head (families/deberta/model.py). DeBERTa-v3's replaced-token detection is
the family's other objective; this one is for a user who wants MLM.

The paper's base recipe: 1M steps of 2K rows of 512 tokens, Adam (eps 1e-6, b2 0.999)
at 2e-4 with 10K warmup steps and linear decay, weight decay 0.01, gradients clipped
at 1, dropout 0.1; the v2 vocabulary (128K SentencePiece pieces).
"""

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
