"""Masked diffusion language modelling (MDLM, Sahoo et al. 2024) with ModernBERT's
encoder, and writing by iterative unmasking.

    python -m pretrainx.main --config=configs/mdlm.py:quickstart --workdir=/tmp/mdlm
    python -m pretrainx.generate --workdir=/tmp/mdlm --prompt="It is a truth" \
        --diffusion_steps=16 --canvas=16 --remasking=confidence --seed=0

`quickstart`: configs/modernbert_quickstart.py (3 layers x 128 on the bundled novels,
1,500 steps) with the objective modernbert_mdlm: every row masked at its own rate t
(low-discrepancy over the batch), every chosen token the mask, the loss weighted by 1/t,
room for every token's prediction. Held out (Alice): the ELBO's bound on the perplexity
(`bound_perplexity`), to set beside configs/ettin_quickstart.py:decoder's perplexity
on the same rows (benchmarks/mdlm_bound.py). The default is ModernBERT-base's recipe
with MDLM's objective (pretrainx/families/modernbert/spec.py names the drift).
"""

from pretrainx.config import sibling_config
from pretrainx.objectives import default_config


def get_config(size: str = "base"):
    if size == "base":
        return default_config("modernbert_mdlm")
    if size != "quickstart":
        raise ValueError(f"configs/mdlm.py:{size}: expected base or quickstart")
    c = sibling_config(__file__, "modernbert_quickstart.py")
    c.objective = "modernbert_mdlm"
    c.data.max_predictions_per_seq = c.seq_len
    return c
