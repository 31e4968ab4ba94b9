"""Qwen3's objective: causal LM over packed documents (objectives/causal_lm.py) with
Qwen3's network."""

from pretrainx.families.qwen3 import model as qwen3
from pretrainx.objectives import causal_lm


class Qwen3Clm(causal_lm.CausalLM):
    network = qwen3.Qwen3
    flops = staticmethod(qwen3.flops_per_token)
    flops_formula = ("3 * (L * (2*(2*h*H + 2*h*KV + 3*h*mlp) + 4*seq*H) + 2*h*V), "
                     "H = heads x head_dim, KV = kv_heads x head_dim")

    def flops_symbols(self, phase) -> dict:
        m = self.cfg.model
        return {"H": m.num_heads * m.head_dim, "KV": m.num_kv_heads * m.head_dim}
