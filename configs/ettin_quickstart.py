"""Ettin's pair at CPU size: an encoder and a decoder trained alike on the bundled novels.

    python -m pretrainx.main --config=configs/ettin_quickstart.py --workdir=/tmp/ettin-enc
    python -m pretrainx.main --config=configs/ettin_quickstart.py:decoder --workdir=/tmp/ettin-dec

Both are ModernBERT's network at 3 layers x 128 (a 32-token window) trained on the same
rows in the same order (Pride and Prejudice and The Adventures of Sherlock Holmes,
packed [CLS] text [SEP] examples), with the same StableAdamW schedule: the encoder by
30% MLM, the decoder by next-token prediction with causal attention. Only `objective`,
`model.causal` and the classifier's pooling (the decoder's last token) differ, as in
configs/ettin.py. Eval: Alice's Adventures in Wonderland (MLM at 15%; next-token
perplexity). Either moves to the other's objective with
`--config.init_from=/tmp/ettin-dec` (the paper's cross-objective continuation).
"""

import os

import pretrainx
from pretrainx.objectives import default_config

ASSETS = os.path.join(os.path.dirname(pretrainx.__file__), "assets")


def get_config(kind: str = "encoder"):
    if kind not in ("encoder", "decoder"):
        raise ValueError(f"configs/ettin_quickstart.py:{kind}: expected encoder or decoder")
    c = default_config("modernbert_clm" if kind == "decoder" else "modernbert")
    c.total_steps = 1500
    c.global_batch_size = 32
    c.seq_len = 128
    c.log_every = 100
    c.eval_every = 750
    c.eval_steps = 10
    c.checkpoint_every = 750
    c.keep_checkpoints = 2
    c.model.update(num_layers=3, hidden_size=128, num_heads=2, mlp_dim=256, vocab_size=4096,
                   local_attention=32, max_position_embeddings=128, dtype="float32")
    c.optimizer.learning_rate = 2e-3  # a 1M-parameter model with minutes to learn in
    c.optimizer.weight_decay = 1e-5 / 2e-3
    c.optimizer.warmup_steps = 100
    c.optimizer.decay_steps = 300
    c.optimizer.accumulate_to, c.optimizer.batch_ramp = 1, 0.0  # a step is the batch
    books = os.path.join(ASSETS, "text")
    c.data.train_files = ",".join(os.path.join(books, f) for f in (
        "pg1342_pride_and_prejudice.txt", "pg1661_adventures_of_sherlock_holmes.txt"))
    c.data.eval_files = os.path.join(books, "pg11_alice_in_wonderland.txt")
    c.data.tokenizer = os.path.join(ASSETS, "spm_4k.model")
    c.data.lower_case = True  # the bundled vocabulary is lower-cased
    c.data.max_predictions_per_seq = 40  # 30% of 126 is 38
    c.data.eval_mask_prob = 0.15
    return c
