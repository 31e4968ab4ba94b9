"""GPT-2's objective: causal LM over packed documents (objectives/causal_lm.py) with
GPT-2's network."""

from pretrainx.families.gpt2 import model as gpt2
from pretrainx.objectives import causal_lm

FEATURES = causal_lm.FEATURES


class CausalLM(causal_lm.CausalLM):
    network = gpt2.GPT2
    flops = staticmethod(gpt2.flops_per_token)
    flops_formula = "3 * (L * (2*(4*h^2 + 2*h*mlp) + 4*seq*h) + 2*h*V)"
