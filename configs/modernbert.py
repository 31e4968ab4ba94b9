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
over 10B. A step is one micro-batch (768 or 448 rows of 1,024 tokens) and an update
takes 1 to 6 (11) of them (train/ramp.py), so steps, warmup and decay count tokens.

The run is the released one's three phases (pretrainx/phasing.py; `--describe` tables
them): `pretrain` at 1,024 tokens, the global RoPE base 10,000 and the rate held after
its warmup, for 1.7T tokens (large: 900B at 5e-4, then `restart` at 5e-5 for 800B, as
large was rolled back and restarted); `extension` to 8,192 tokens with the global
RoPE base 160,000, 250B tokens at a constant 3e-4 (large: 5e-5), micro-batches of the
same tokens (96 or 56 rows, updates of 576 or 616); `decay`, 50B tokens of 1 - sqrt
decay to 0. Its data mix is the run's until given:
`--config.phases.decay.data.train_files=...`. Drift from the release
(docs/recipes.md#modernbert): the decay ends at 0 (theirs at 0.001 x peak); weight
decay follows the rate relative to the first phase's peak; large's decay rows 616 (624).
"""

import ml_collections

from pretrainx.objectives import default_config
from pretrainx.families.modernbert.modernbert_mlm import token_schedule

SIZES = {  # layers, hidden, heads, GeGLU half width, peak lr, warmup tokens,
    #        first batch (the micro-batch), final batch, batch warmup tokens
    "base": (22, 768, 12, 1152, 8e-4, 3e9, 768, 4608, 50e9),
    "large": (28, 1024, 16, 2624, 5e-4, 2e9, 448, 4928, 10e9),
}


# (name, tokens, learning rate: None keeps the phase before's) of the 1,024-token
# phases before the context extension
FIRST_PHASES = {"base": (("pretrain", 1.7e12, None),),
                "large": (("pretrain", 900e9, None), ("restart", 800e9, 5e-5))}
EXTENSION_TOKENS, DECAY_TOKENS, LONG = 250e9, 50e9, 8192
EXTENSION_RATE = {"base": 3e-4, "large": 5e-5}


def get_config(size: str = "base"):
    if size not in SIZES:
        raise ValueError(f"unknown ModernBERT size {size!r}; choose from {', '.join(SIZES)}")
    layers, hidden, heads, mlp, lr, warmup, first, final, ramp = SIZES[size]
    c = default_config("modernbert")
    c.model.update(num_layers=layers, hidden_size=hidden, num_heads=heads, mlp_dim=mlp,
                   dtype="bfloat16")  # compute; parameters and optimizer state stay float32
    total = sum(t for _, t, _ in FIRST_PHASES[size]) + EXTENSION_TOKENS + DECAY_TOKENS
    token_schedule(c, micro_batch=first, accumulate_to=final // first, learning_rate=lr,
                   warmup_tokens=warmup, ramp_tokens=ramp, total_tokens=total,
                   decay_tokens=DECAY_TOKENS)
    step_tokens = c.global_batch_size * c.seq_len
    names = []
    for name, tokens, rate in FIRST_PHASES[size]:
        phase = {"steps": round(tokens / step_tokens)}
        if not names:  # the rate held after its warmup; RoPE 10,000 in every layer
            phase.update({"model": {"global_rope_theta": 10_000.0},
                          "optimizer": {"schedule": "constant"}})
        else:
            phase["optimizer"] = {"learning_rate": rate, "warmup_steps": 0}
        c.phases[name] = ml_collections.ConfigDict(phase)
        names.append(name)
    long_rows = c.global_batch_size * c.seq_len // LONG  # a micro-batch of the same tokens
    extension = round(EXTENSION_TOKENS / step_tokens)
    c.phases.extension = ml_collections.ConfigDict({
        "steps": extension, "seq_len": LONG, "global_batch_size": long_rows,
        "model": {"global_rope_theta": 160_000.0},
        "data": {"max_predictions_per_seq": 2464,  # 30% of 8,190 is 2,457
                 "train_files": ml_collections.config_dict.placeholder(str)},
        "optimizer": {"learning_rate": EXTENSION_RATE[size], "warmup_steps": 0,
                      "schedule": "constant"}})
    decay = c.total_steps - sum(c.phases[n].steps for n in names) - extension
    c.phases.decay = ml_collections.ConfigDict({
        # the higher-quality mix, where there is one (None until set: the run's)
        "data": {"train_files": ml_collections.config_dict.placeholder(str)},
        "optimizer": {"schedule": "warmup_stable_decay", "decay_steps": decay}})
    c.phase_order = ",".join(names + ["extension", "decay"])
    c.mesh.data = 1
    c.mesh.fsdp = -1  # FSDP over every device, as the BERT recipes
    return c
