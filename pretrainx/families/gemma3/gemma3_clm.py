"""Gemma 3's objective: causal LM over packed documents (objectives/causal_lm.py) with
Gemma 3's network, each document opened by <bos> as Gemma's tokenizer adds it."""

from pretrainx.families.gemma3 import model as gemma3
from pretrainx.objectives import causal_lm


class Gemma3Clm(causal_lm.CausalLM):
    network = gemma3.Gemma3
    flops = staticmethod(gemma3.flops_per_token)
    flops_formula = ("3 * (L * 2*(2*h*H + 2*h*KV + 3*h*mlp) + 4*H*(G*seq + (L - G)*min(seq, W))"
                     " + 2*h*V), H = heads x head_dim, KV = kv_heads x head_dim, G global "
                     "layers, W = the keys a sliding layer reads")
    begins_with_bos = True

    def flops_symbols(self, phase) -> dict:
        m = self.cfg.model
        sliding = [i for i in range(m.num_layers) if not gemma3.is_global(m, i)]
        return {"H": m.num_heads * m.head_dim, "KV": m.num_kv_heads * m.head_dim,
                "G": m.num_layers - len(sliding),
                "W": gemma3.attended_keys(m, sliding[0], 10**9) if sliding else 0}
