"""Gemma 2's objective: causal LM over packed documents (objectives/causal_lm.py) with
Gemma 2's network, each document opened by <bos> where the tokenizer has one."""

from pretrainx.families.gemma2 import model as gemma2
from pretrainx.families.t5gemma import model as t5gemma
from pretrainx.objectives import causal_lm


class Gemma2Clm(causal_lm.CausalLM):
    network = gemma2.Gemma2
    flops = staticmethod(gemma2.flops_per_token)
    flops_formula = ("3 * (L * 2*(2*h*H + 2*h*KV + 3*h*mlp) + 4*H*(G*seq + (L - G)*min(seq, W))"
                     " + 2*h*V), H = heads x head_dim, KV = kv_heads x head_dim, G global "
                     "layers, W = sliding_window")
    begins_with_bos = True

    def flops_symbols(self, phase) -> dict:
        m = self.cfg.model
        return {"H": m.num_heads * m.head_dim, "KV": m.num_kv_heads * m.head_dim,
                "G": sum(t5gemma.is_global(i) for i in range(m.num_layers)),
                "W": m.sliding_window}
