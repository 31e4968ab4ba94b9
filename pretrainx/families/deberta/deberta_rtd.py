"""DeBERTa-v3's objective (He et al. 2023): replaced token detection with
gradient-disentangled embedding sharing (families/deberta/rtd_model.py), on DeBERTa's encoder.

Rows are FULL-SENTENCES with a fresh mask each time a row is seen (15%, 80/10/10);
the generator (the discriminator's width, half its depth) fills the masked positions
by sampling, the discriminator tells every token's replaced or original; loss =
generator MLM + 50 x the discriminator's mean binary cross-entropy (ELECTRA's weight,
which DeBERTa-v3 keeps; objectives/rtd.py). `--describe` prints the discriminator's
parameters as HF's DebertaV2Model holds them: DeBERTa-v3-base 184M (86M backbone +
98M embeddings).
"""

import jax

from pretrainx.families.deberta import model as deberta
from pretrainx.families.deberta import rtd_model as deberta_rtd
from pretrainx.objectives import assembled, encoder, rows, rtd


class DebertaRtd(assembled.Assembled):
    flops_formula = ("3 * ((L + L_gen) * (2*(4*h^2 + 2*h*mlp) + 4*seq*h + 8*B*h + 8*B*h^2/seq) "
                     "+ P*2*(h^2 + h*V)/seq + 2*(h^2 + h)), L_gen = the generator's layers, "
                     "B = position_buckets (c2p and p2c read 2B relative rows)")

    def __init__(self, cfg, tokenizer):
        super().__init__(cfg, tokenizer, deberta_rtd.DebertaV3ForPreTraining(cfg.model),
                         encoder.masked_corpus(cfg, tokenizer, vocab_must_fit=True),
                         data=rows.FullSentencesRows(cfg, tokenizer),
                         losses=rtd.RtdLoss(cfg.gen_weight, cfg.disc_weight))

    def describe(self, phase) -> dict:
        shapes = jax.eval_shape(lambda: self.model.init(
            jax.random.key(0), self.example_batch(1, phase), deterministic=True))
        gen = deberta_rtd.generator_config(self.cfg.model)
        return {"max_predictions_per_seq": phase.max_predictions,
                "generator": f"L{gen.num_layers}/H{gen.hidden_size}/A{gen.num_heads}",
                **deberta_rtd.split_counts(shapes["params"])}

    def flops_symbols(self, phase) -> dict:
        m = self.cfg.model
        return {"B": m.position_buckets, "L_gen": deberta_rtd.generator_config(m).num_layers}

    def flops_per_token(self, phase) -> float:
        m, s = self.cfg.model, phase.seq_len
        h = m.hidden_size
        layers_total = m.num_layers + deberta_rtd.generator_config(m).num_layers
        head = phase.max_predictions * 2 * (h * h + h * m.vocab_size) / s
        return 3.0 * (layers_total * deberta.flops_per_layer(m, s) + head + 2 * (h * h + h))
