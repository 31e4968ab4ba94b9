"""Gemma 3's objective: causal LM over packed documents (objectives/causal_lm.py) with
Gemma 3's network, each document opened by <bos> as Gemma's tokenizer adds it."""

from pretrainx.families.gemma3 import model as gemma3
from pretrainx.objectives import causal_lm


class Gemma3Clm(causal_lm.CausalLM):
    network = gemma3.Gemma3
    flops = staticmethod(gemma3.flops_per_token)
    flops_formula = ("3 * (L * 2*(2*h*H + 2*h*KV + 3*h*mlp) + sum over layers of "
                     "4*keys*H + 2*h*V), H = heads x head_dim, KV = kv_heads x head_dim, "
                     "keys = seq in a global layer, the window in a sliding one")
    begins_with_bos = True

    def flops_symbols(self, phase) -> dict:
        m = self.cfg.model
        return {"H": m.num_heads * m.head_dim, "KV": m.num_kv_heads * m.head_dim}
