"""Gemma 3 (Gemma Team 2025): causal LM with Gemma 3's text decoder, at a CPU size or as
released.

    python -m pretrainx.main --config=configs/gemma3.py:quickstart --workdir=/tmp/gemma3
    python -m pretrainx.main --config=configs/gemma3.py:1b --workdir=gs://BUCKET/gemma3 \
        --config.init_from=/models/gemma-3-1b-pt \
        --config.data.train_files='/data/corpus/*.jsonl'   # continue the released model

`quickstart`: 3 layers 64 wide (4 query heads sharing one key/value head of 16,
QK-norm, GeGLU, pre- and post-norms, a global layer after two sliding ones of 16
keys) at length 64 on the bundled novels, GPT-2's byte-level BPE from
../shared/data/tokenizers/gpt2 in a table of 50,304 rows; 300 steps in a few minutes on
2 cores, the loss falling from ln(50,304) = 10.8. `270m` (the default) and `1b` are
the released models' keys with the recipe of pretrainx/families/gemma3/spec.py (the
report publishes no optimizer values: the drift is named there); with init_from an HF
folder its model keys and tokenizer come from the folder.
"""

import os

import pretrainx
from pretrainx.families.gemma3 import model as gemma3
from pretrainx.objectives import default_config

ASSETS = os.path.join(os.path.dirname(pretrainx.__file__), "assets")
GPT2 = os.path.normpath(os.path.join(
    os.path.dirname(os.path.realpath(__file__)), "..", "..", "shared", "data",
    "tokenizers", "gpt2"))


def get_config(size: str = "270m"):
    c = default_config("gemma3_clm")
    if size in gemma3.SIZES:
        c.model.update(gemma3.SIZES[size])
        c.model.dtype = "bfloat16"  # compute; parameters and optimizer state stay float32
        c.mesh.data, c.mesh.fsdp = 1, -1
        return c
    if size != "quickstart":
        raise ValueError(f"unknown Gemma 3 size {size!r}; choose 270m, 1b or quickstart")
    c.total_steps = 300
    c.global_batch_size = 16
    c.seq_len = 64
    c.log_every = 50
    c.eval_every = 150
    c.eval_steps = 8
    c.checkpoint_every = 150
    c.keep_checkpoints = 2
    c.model.update(num_layers=3, hidden_size=64, num_heads=4, num_kv_heads=1, head_dim=16,
                   query_pre_attn_scalar=16, mlp_dim=192, vocab_size=50304,
                   max_position_embeddings=64, sliding_window=16, sliding_window_pattern=3,
                   dtype="float32")
    c.optimizer.learning_rate = 2e-3
    c.optimizer.warmup_steps = 30
    books = os.path.join(ASSETS, "text")
    c.data.train_files = ",".join(os.path.join(books, f) for f in (
        "pg1342_pride_and_prejudice.txt", "pg1661_adventures_of_sherlock_holmes.txt"))
    c.data.eval_files = os.path.join(books, "pg11_alice_in_wonderland.txt")
    c.data.tokenizer = GPT2
    return c
