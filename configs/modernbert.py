"""ModernBERT (Warner et al. 2024): a BERT rebuilt with what decoders learned since 2019.

    python -m pretrainx.main --config=configs/modernbert.py:base --workdir=gs://BUCKET/mbert \
        --config.data.train_files='/data/text/*.jsonl' --config.data.tokenizer=/data/spm.model

The model as released (families/modernbert/model.py): pre-LN without biases, GeGLU, RoPE
(base 160,000 in the global layers, 10,000 in the local ones), a global layer every
third layer and a 128-token sliding window in the others, packed rows whose documents
never see each other, vocabulary 50,368. The objective (families/modernbert/modernbert_mlm.py):
30% masking, no NSP, the MLM head only at masked positions. The optimiser: StableAdamW,
b2 0.98, eps 1e-6, decoupled weight decay 1e-5, the trapezoidal warmup-stable-decay
schedule with a 1 - sqrt decay; rows of 1,024 tokens for 1.7T tokens.

Sizes (the paper's table 4 and section 2.2): base 22 layers x 768 (GeGLU 2 x 1,152), lr
8e-4 after 3B tokens of warmup, the batch warming up from 768 to 4,608 rows over 50B
tokens; large 28 x 1,024 (GeGLU 2 x 2,624), lr 5e-4 after 2B tokens, 448 to 4,928 rows
over 10B. A step is one micro-batch (768 or 448 rows) and an update takes 1 to 6 (11)
of them (train/ramp.py), so total_steps, warmup and decay count micro-batches, which
is tokens. Left out (docs/recipes.md#modernbert): the 8,192-token context extension
and large's restart at 5e-5.
"""

from pretrainx.objectives import default_config
from pretrainx.families.modernbert.modernbert_mlm import token_schedule

SIZES = {  # layers, hidden, heads, GeGLU half width, peak lr, warmup tokens,
    #        first batch (the micro-batch), final batch, batch warmup tokens
    "base": (22, 768, 12, 1152, 8e-4, 3e9, 768, 4608, 50e9),
    "large": (28, 1024, 16, 2624, 5e-4, 2e9, 448, 4928, 10e9),
}


def get_config(size: str = "base"):
    if size not in SIZES:
        raise ValueError(f"unknown ModernBERT size {size!r}; choose from {', '.join(SIZES)}")
    layers, hidden, heads, mlp, lr, warmup, first, final, ramp = SIZES[size]
    c = default_config("modernbert")
    c.model.update(num_layers=layers, hidden_size=hidden, num_heads=heads, mlp_dim=mlp,
                   dtype="bfloat16")  # compute; parameters and optimizer state stay float32
    token_schedule(c, micro_batch=first, accumulate_to=final // first, learning_rate=lr,
                   warmup_tokens=warmup, ramp_tokens=ramp)
    c.mesh.data = 1
    c.mesh.fsdp = -1  # FSDP over every device, as the BERT recipes
    return c
