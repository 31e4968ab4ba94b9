"""Ettin (Weller et al. 2025): paired encoders and decoders trained alike, 17M to 1B.

    python -m pretrainx.main --config=configs/ettin.py:150m --workdir=gs://BUCKET/ettin-enc \
        --config.data.train_files='/data/text/*.jsonl' --config.data.tokenizer=/data/tok.json
    python -m pretrainx.main --config=configs/ettin.py:150m,decoder \
        --workdir=gs://BUCKET/ettin-dec --config.data.train_files=... (the same files)

The encoder is ModernBERT's network (families/modernbert/model.py) and MLM; the decoder
(`,decoder`) the same network with causal attention and next-token prediction
(families/modernbert/modernbert_clm.py) on the encoder's own rows, in the same order.
Shapes, schedule and phases are one table for both; only `objective` and
`model.causal` (with the classifier's pooling: the last token) differ.

Values are the authors' training configs (github.com/JHU-CLSP/ettin-encoder-vs-decoder,
pretraining/configs/standard/*): vocabulary 50,368, a global layer every third, a
128-token window, StableAdamW (b2 0.98, eps 1e-6, decoupled weight decay), three phases:
`pretrain` 1.7T tokens at 1,024 with 30% masking, RoPE base 10,000 everywhere, the rate
held after its warmup while the batch warms up to 4,608 rows; `extension` 250B tokens at
7,999 with the global base 160,000 and a 1 - sqrt decay to half the peak; `decay` 50B
tokens, 15% masking, base 160,000 in every layer, from half the peak by 1 - sqrt to
0.04 of that (1b: 83.3B and 16.7B). Parameter counts: tests/families/test_ettin.py, against
transformers' classes built from the released shapes. Drift (docs/recipes.md#ettin):
rows are packed (theirs unpacked), the long phases keep phase 1's tokens per update
(theirs 4,608 documents of up to 7,999 tokens), and the batch warmup starts at 8 of
their per-device micro-batches (ModernBERT's 768 = 96 x 8; 32m's 1,024 does not divide
4,608, so 1,152).
"""

import ml_collections

from pretrainx.families.modernbert.modernbert_mlm import token_schedule
from pretrainx.objectives import default_config

SIZES = {  # layers, hidden, heads, GeGLU half width, peak lr, weight decay, warmup
    #         tokens, first batch (the micro-batch), batch warmup tokens
    "17m": (7, 256, 4, 384, 3e-3, 3e-4, 4e9, 1152, 125e9),
    "32m": (10, 384, 6, 576, 3e-3, 3e-4, 4e9, 1152, 100e9),
    "68m": (19, 512, 8, 768, 3e-3, 3e-4, 3e9, 768, 75e9),
    "150m": (22, 768, 12, 1152, 8e-4, 1e-5, 3e9, 576, 50e9),
    "400m": (28, 1024, 16, 2624, 5e-4, 1e-5, 2e9, 384, 10e9),
    "1b": (28, 1792, 28, 3840, 5e-4, 5e-5, 2e9, 192, 3e9),
}
FINAL_BATCH, PRETRAIN_TOKENS, LONG = 4608, 1.7e12, 7999
LATER_TOKENS = {"1b": (83.333e9, 16.667e9)}  # (extension, decay); the others 250B, 50B


def get_config(arg: str = "150m"):
    size, _, kind = arg.partition(",")
    if size not in SIZES or kind not in ("", "encoder", "decoder"):
        raise ValueError(f"configs/ettin.py:{arg}: expected SIZE or SIZE,decoder with SIZE one "
                         f"of {', '.join(SIZES)}")
    layers, hidden, heads, mlp, lr, decay, warmup, first, ramp = SIZES[size]
    extension_tokens, decay_tokens = LATER_TOKENS.get(size, (250e9, 50e9))
    c = default_config("modernbert_clm" if kind == "decoder" else "modernbert")
    c.model.update(num_layers=layers, hidden_size=hidden, num_heads=heads, mlp_dim=mlp,
                   max_position_embeddings=LONG, local_rope_theta=10_000.0,
                   dtype="bfloat16")  # compute; parameters and optimizer state stay float32
    token_schedule(c, micro_batch=first, accumulate_to=FINAL_BATCH // first,
                   learning_rate=lr, warmup_tokens=warmup, ramp_tokens=ramp,
                   total_tokens=PRETRAIN_TOKENS + extension_tokens + decay_tokens,
                   decay_tokens=decay_tokens)
    c.optimizer.weight_decay = decay / lr  # decoupled: optax multiplies it by the rate
    step_tokens = c.global_batch_size * c.seq_len
    long_rows = step_tokens // LONG  # a micro-batch of about the same tokens
    pretrain = round(PRETRAIN_TOKENS / step_tokens)
    extension = round(extension_tokens / (long_rows * LONG))
    final = round(decay_tokens / (long_rows * LONG))
    c.total_steps = pretrain + extension + final
    c.optimizer.batch_ramp = ramp / step_tokens / c.total_steps  # the ramp's steps kept
    c.optimizer.decay_steps = final
    c.phases.pretrain = ml_collections.ConfigDict({
        "steps": pretrain, "model": {"global_rope_theta": 10_000.0},
        "optimizer": {"schedule": "constant"}})
    long_data = {"train_files": ml_collections.config_dict.placeholder(str)}
    c.phases.extension = ml_collections.ConfigDict({
        "steps": extension, "seq_len": LONG, "global_batch_size": long_rows,
        "model": {"global_rope_theta": 160_000.0},
        "data": dict(long_data, max_predictions_per_seq=2400),  # 30% of 7,997 is 2,399
        "optimizer": {"warmup_steps": 0, "schedule": "warmup_stable_decay",
                      "decay_steps": extension, "final_lr_fraction": 0.5}})
    c.phases.decay = ml_collections.ConfigDict({
        "seq_len": LONG, "global_batch_size": long_rows,
        "model": {"local_rope_theta": 160_000.0},
        "data": dict(long_data, mask_prob=0.15, max_predictions_per_seq=1200),
        "optimizer": {"learning_rate": lr / 2, "warmup_steps": 0, "decay_steps": final,
                      "schedule": "warmup_stable_decay", "final_lr_fraction": 0.04}})
    c.phase_order = "pretrain,extension,decay"
    c.mesh.data = 1
    c.mesh.fsdp = -1  # FSDP over every device, as the ModernBERT recipes
    return c
