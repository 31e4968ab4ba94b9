"""Masked diffusion language modelling (MDLM, Sahoo et al. 2024) with ModernBERT's
encoder, or with a decoder made bidirectional (Dream's adaptation), and writing by
iterative unmasking.

    python -m pretrainx.main --config=configs/mdlm.py:quickstart --workdir=/tmp/mdlm
    python -m pretrainx.generate --workdir=/tmp/mdlm --prompt="It is a truth" \
        --diffusion_steps=16 --canvas=16 --remasking=confidence --seed=0
    python -m pretrainx.main --config=configs/gemma3.py:quickstart --workdir=/tmp/gemma3
    python -m pretrainx.main --config=configs/mdlm.py:gemma3 --workdir=/tmp/gemma3_mdlm \
        --config.init_from=/tmp/gemma3

`quickstart`: configs/modernbert_quickstart.py (3 layers x 128 on the bundled novels,
1,500 steps) with the objective modernbert_mdlm: every row masked at its own rate t
(low-discrepancy over the batch), every chosen token the mask, the loss weighted by 1/t,
room for every token's prediction. Held out (Alice): the ELBO's bound on the perplexity
(`bound_perplexity`), to set beside configs/ettin_quickstart.py:decoder's perplexity
on the same rows (benchmarks/mdlm_bound.py). The default is ModernBERT-base's recipe
with MDLM's objective (pretrainx/families/modernbert/spec.py names the drift).
`gemma3`: configs/gemma3.py:quickstart's causal run continued for 300 steps with
gemma3_mdlm (pretrainx/objectives/shifted_mdlm.py: bidirectional, each masked token
predicted from the output before it, as Dream adapts Qwen2.5), at the quickstart's rows
and a rate a 3M model can use (1e-3).
"""

from pretrainx.config import sibling_config
from pretrainx.objectives import default_config


def get_config(size: str = "base"):
    if size == "base":
        return default_config("modernbert_mdlm")
    if size == "gemma3":
        base = sibling_config(__file__, "gemma3.py", "quickstart")
        c = default_config("gemma3_mdlm")
        c.model = base.model
        c.model.causal = False
        c.data.update(train_files=base.data.train_files, eval_files=base.data.eval_files,
                      tokenizer=base.data.tokenizer)
        c.update(total_steps=300, global_batch_size=16, seq_len=64, log_every=50,
                 eval_every=100, eval_steps=8, checkpoint_every=100, keep_checkpoints=2)
        c.optimizer.update(learning_rate=1e-3, warmup_steps=30)
        return c
    if size != "quickstart":
        raise ValueError(f"configs/mdlm.py:{size}: expected base, quickstart or gemma3")
    c = sibling_config(__file__, "modernbert_quickstart.py")
    c.objective = "modernbert_mdlm"
    c.data.max_predictions_per_seq = c.seq_len
    return c
