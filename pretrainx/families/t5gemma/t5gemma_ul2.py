"""T5Gemma trained on UL2's mixture (T5Gemma's UL2 variant; `data.denoisers=S` its
PrefixLM, with `distill.teacher` its PrefixLM + KD): T5's data recipe and packing
(families/t5/ul2.py) with T5Gemma's network, started from Gemma 2 decoders where adapt.*
names them (adapt.py)."""

from pretrainx.families.t5 import ul2
from pretrainx.families.t5gemma import adapt
from pretrainx.families.t5gemma import model as t5gemma
from pretrainx.objectives import logit_distill


class T5GemmaUl2(logit_distill.Distilled, ul2.Ul2):
    flops_formula = (
        "3 * 2 * (L_enc * S_in * (2*d*I + 2*d*K + 3*d*mlp + 2*S_in*I) + L_dec * (S_tgt * "
        "(2*d_dec*I_dec + 2*d_dec*K_dec + 2*S_tgt*I_dec + 2*d_dec*I_dec + 2*S_in*I_dec + "
        "3*d_dec*mlp_dec) + S_in * 2*d*K_dec) + S_tgt*d_dec*V) / S_in, I and K = heads and "
        "kv_heads x head_dim (the decoder's: _dec), S_in and S_tgt the inputs' and targets' "
        "lengths")

    weights_key = "decoder_loss_weights"
    teacher_module = logit_distill.RowsTeacherStudent

    def __init__(self, cfg, tokenizer, imported=None):
        ul2.Ul2.__init__(self, cfg, tokenizer)
        self.model = t5gemma.T5Gemma(cfg.model)
        if adapt.ENCODER in (imported or {}):  # refused now, before anything is built
            adapt.check_source(cfg, imported[adapt.ENCODER], adapt.ENCODER, False)
            adapt.check_source(cfg, imported[adapt.DECODER], adapt.DECODER, True)
        self.add_teacher(imported)

    def adopt(self, params: dict, imported: dict) -> dict:
        """A fresh run's parameters: the teacher's own beside the student's (with
        distill.teacher), the student's from the decoders adapt.* names (if it does)."""
        if self.teacher is not None:
            params = super().adopt(params, imported)
        if adapt.ENCODER not in imported:
            return params
        student = adapt.from_decoders(logit_distill.student_params(params),
                                      imported[adapt.ENCODER], imported[adapt.DECODER],
                                      self.cfg)
        return dict(params, student=student) if "student" in params else student

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
