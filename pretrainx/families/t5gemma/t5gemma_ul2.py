"""T5Gemma trained on UL2's mixture (T5Gemma's UL2 variant; `data.denoisers=S` its
PrefixLM): T5's data recipe and packing (families/t5/ul2.py) with T5Gemma's network,
started from Gemma 2 decoders where adapt.* names them (adapt.py)."""

from pretrainx.families.t5 import ul2
from pretrainx.families.t5gemma import adapt
from pretrainx.families.t5gemma import model as t5gemma


class T5GemmaUl2(ul2.Ul2):
    flops_formula = (
        "3 * 2 * (L_enc * S_in * (2*d*I + 2*d*K + 3*d*mlp + 2*S_in*I) + L_dec * (S_tgt * "
        "(2*d_dec*I_dec + 2*d_dec*K_dec + 2*S_tgt*I_dec + 2*d_dec*I_dec + 2*S_in*I_dec + "
        "3*d_dec*mlp_dec) + S_in * 2*d*K_dec) + S_tgt*d_dec*V) / S_in, I and K = heads and "
        "kv_heads x head_dim (the decoder's: _dec), S_in and S_tgt the inputs' and targets' "
        "lengths")

    def __init__(self, cfg, tokenizer, imported=None):
        super().__init__(cfg, tokenizer)
        self.model = t5gemma.T5Gemma(cfg.model)
        if imported:  # refused now, before anything is built, if they do not fit
            adapt.check_source(cfg, imported[adapt.ENCODER], adapt.ENCODER, False)
            adapt.check_source(cfg, imported[adapt.DECODER], adapt.DECODER, True)

    def adopt(self, params: dict, imported: dict) -> dict:
        """A fresh run's parameters from the decoders adapt.* names."""
        return adapt.from_decoders(params, imported[adapt.ENCODER], imported[adapt.DECODER],
                                   self.cfg)

    def describe(self, phase) -> dict:
        out = super().describe(phase)
        a = self.cfg.adapt
        if a.encoder_from:
            out.update(encoder_from=a.encoder_from,
                       decoder_from=a.decoder_from or a.encoder_from)
        return out

    def flops_symbols(self, phase) -> dict:
        m = self.cfg.model
        _, inputs_length, targets_length = self.lengths(phase)
        return {"S_in": inputs_length, "S_tgt": targets_length,
                "L_enc": m.num_layers, "L_dec": m.num_decoder_layers, "d": m.hidden_size,
                "d_dec": m.decoder_hidden_size, "mlp_dec": m.decoder_mlp_dim,
                "I": m.num_heads * m.head_dim, "K": m.num_kv_heads * m.head_dim,
                "I_dec": m.decoder_num_heads * m.decoder_head_dim,
                "K_dec": m.decoder_num_kv_heads * m.decoder_head_dim}

    def flops_per_token(self, phase) -> float:
        _, inputs_length, targets_length = self.lengths(phase)
        return t5gemma.flops_per_example(self.cfg.model, inputs_length,
                                         targets_length) / inputs_length
