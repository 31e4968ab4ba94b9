"""Gemma 2 (Gemma Team 2024): causal LM with the decoder T5Gemma adapts, at a CPU size or
at the released sizes.

    python -m pretrainx.main --config=configs/gemma2.py:quickstart --workdir=/tmp/gemma2
    python -m pretrainx.main --config=configs/t5gemma.py:quickstart --workdir=/tmp/adapted \
        --config.adapt.encoder_from=/tmp/gemma2

`quickstart`: 2 layers 128 wide (4 query heads sharing 2 key/value heads of 32, soft-caps
50 and 30, a sliding layer of 64 keys then a global one), the shape of each stack of
configs/t5gemma.py:quickstart, on the bundled novels with its vocabulary (4,000 pieces
and UL2's mode tokens; 4,224 rows, as the T5Gemma's) at rows of 256, 300 steps of 8: a
decoder to adapt into that encoder-decoder, in minutes on a CPU. `2b` (the default) and
`9b` are Gemma 2's released shapes with the recipe of pretrainx/families/gemma2/spec.py
(its drift named there); with init_from an HF folder its keys come from the folder.
"""

from pretrainx.data import bundled
from pretrainx.objectives import default_config

SIZES = {  # layers, width, feed-forward, heads, key/value heads (head_dim 256)
    "2b": (26, 2304, 9216, 8, 4), "9b": (42, 3584, 14336, 16, 8)}


def get_config(size: str = "2b"):
    c = default_config("gemma2_clm")
    if size in SIZES:
        layers, width, mlp, heads, kv = SIZES[size]
        c.model.update(num_layers=layers, hidden_size=width, mlp_dim=mlp, num_heads=heads,
                       num_kv_heads=kv, dtype="bfloat16")
        c.mesh.data, c.mesh.fsdp = 1, -1
        return c
    if size != "quickstart":
        raise ValueError(f"unknown Gemma 2 size {size!r}; choose 2b, 9b or quickstart")
    c.model.update(num_layers=2, hidden_size=128, mlp_dim=256, num_heads=4, num_kv_heads=2,
                   head_dim=32, query_pre_attn_scalar=32, sliding_window=64, vocab_size=4224,
                   max_position_embeddings=256, dtype="float32")
    c.update(total_steps=300, global_batch_size=8, seq_len=256, log_every=25,
             eval_every=150, eval_steps=4, checkpoint_every=150, keep_checkpoints=2)
    c.optimizer.update(learning_rate=3e-3, warmup_steps=30)
    bundled.use_books(c.data, tokenizer="spm_ul2_4k.model")
    return c
