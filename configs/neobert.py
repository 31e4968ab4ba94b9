"""NeoBERT (Le Breton et al. 2025), as released: 28 x 768, pre-RMSNorm, RoPE, SwiGLU,
20% masking, AdamW (b2 0.95) with cosine decay to 10%, 1M steps at 1,024 tokens then
50,000 at 4,096 (2M tokens a step throughout); 221.7M parameters in the encoder and
245.1M with its decoder (`neobert.parameter_count`; the released float32 file holds 245.2M;
the paper rounds to 250M).

    python -m pretrainx.main --config=configs/neobert.py --workdir=gs://BUCKET/neobert \
        --config.data.train_files='/data/refinedweb/*.jsonl' \
        --config.data.tokenizer=/data/bert-base-uncased/vocab.txt

`configs/neobert.py:quickstart` is the same architecture and objective at CPU size (4
layers x 128 on the bundled novels, a few minutes on 2 cores, eval on the unseen
Alice; measured in docs/recipes.md#neobert):

    python -m pretrainx.main --config=configs/neobert.py:quickstart --workdir=/tmp/neobert

transformers has no NeoBERT class, so a run exports as its pretrainx workdir (loaded
with pretrainx.load), not to HF.
"""

import os

import pretrainx
from pretrainx.objectives import default_config

ASSETS = os.path.join(os.path.dirname(pretrainx.__file__), "assets")


def get_config(arg=None):
    c = default_config("neobert")
    if arg is None:
        return c
    if arg != "quickstart":
        raise ValueError(f"configs/neobert.py:{arg}: expected no argument or 'quickstart'")
    c.total_steps = 1000
    c.global_batch_size = 32
    c.seq_len = 128
    c.log_every = 100
    c.eval_every = 500
    c.eval_steps = 10
    c.checkpoint_every = 500
    c.keep_checkpoints = 2
    c.phase2.fraction = 0.0  # one length: the context extension is the full recipe's
    c.model.update(num_layers=4, hidden_size=128, num_heads=2, mlp_dim=344, vocab_size=4096,
                   max_position_embeddings=128)  # mlp: 2/3 of 512, a multiple of 8
    c.optimizer.learning_rate = 2e-3  # a 1M-parameter model with minutes to learn in
    c.optimizer.warmup_steps = 100
    books = os.path.join(ASSETS, "text")
    c.data.train_files = ",".join(os.path.join(books, f) for f in (
        "pg1342_pride_and_prejudice.txt", "pg1661_adventures_of_sherlock_holmes.txt"))
    c.data.eval_files = os.path.join(books, "pg11_alice_in_wonderland.txt")
    c.data.tokenizer = os.path.join(ASSETS, "spm_4k.model")
    c.data.max_predictions_per_seq = 26  # 20% of 126
    c.data.eval_mask_prob = 0.15  # read as the BERT quickstart's
    return c
