"""DeBERTa's masked-LM objective (He et al. 2021, the v1/v2 recipe): dynamic masking
(15%, 80/10/10) of FULL-SENTENCES rows, and the enhanced mask decoder between the
encoder and the MLM head (families/deberta/model.py). DeBERTa-v3's replaced-token detection is
the family's other objective; this one is for a user who wants MLM.

The paper's base recipe: 1M steps of 2K rows of 512 tokens, Adam (eps 1e-6, b2 0.999)
at 2e-4 with 10K warmup steps and linear decay, weight decay 0.01, gradients clipped
at 1, dropout 0.1; the v2 vocabulary (128K SentencePiece pieces).
"""

from pretrainx.families.deberta import model as deberta
from pretrainx.objectives import assembled, encoder, rows


class DebertaMlm(assembled.Assembled):
    flops_formula = ("3 * ((L + EMD) * (2*(4*h^2 + 2*h*mlp) + 4*seq*h + 8*B*h + 8*B*h^2/seq) "
                     "+ P*2*(h^2 + h*V)/seq), B = position_buckets (c2p and p2c read 2B "
                     "relative rows), EMD = 2 passes of the last layer with the enhanced mask "
                     "decoder, else 0")

    def __init__(self, cfg, tokenizer):
        super().__init__(cfg, tokenizer, deberta.DebertaForMaskedLM(cfg.model),
                         encoder.masked_corpus(cfg, tokenizer, vocab_must_fit=True),
                         data=rows.FullSentencesRows(cfg, tokenizer), losses=encoder.MlmLoss())

    def describe(self, phase) -> dict:
        return {"max_predictions_per_seq": phase.max_predictions}

    def flops_symbols(self, phase) -> dict:
        m = self.cfg.model
        return {"B": m.position_buckets, "EMD": 2 if m.enhanced_mask_decoder else 0}

    def flops_per_token(self, phase) -> float:
        """DeBERTa's layers (families/deberta/model.py: flops_per_layer), the EMD's two extra passes
        of the last layer, and the head at the predicted rows."""
        m, s = self.cfg.model, phase.seq_len
        layer = deberta.flops_per_layer(m, s)
        emd = 2 * layer if m.enhanced_mask_decoder else 0
        h = m.hidden_size
        head = phase.max_predictions * 2 * (h * h + h * m.vocab_size) / s
        return 3.0 * (m.num_layers * layer + emd + head)
