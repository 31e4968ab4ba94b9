"""ModernBERT at CPU size: its architecture and objective on the bundled novels.

    python -m pretrainx.main --config=configs/modernbert_quickstart.py --workdir=/tmp/mbert
    python -m pretrainx.data --config=configs/modernbert_quickstart.py --stats --show=2

The model is ModernBERT's (pre-LN without biases, GeGLU, RoPE, a global layer every
third layer and a 32-token window in the others) at 3 layers x 128, so that both kinds
of layer run; the objective is its own (30% masking, packed documents of the books'
paragraphs, the head at masked positions only); StableAdamW with the trapezoidal
schedule. Training: Pride and Prejudice and The Adventures of Sherlock Holmes; eval:
Alice's Adventures in Wonderland, at 15% masking (data.eval_mask_prob) so that it reads
as the BERT quickstart's. Measured: see docs/recipes.md#modernbert.
"""

import os

import pretrainx
from pretrainx.objectives import default_config

ASSETS = os.path.join(os.path.dirname(pretrainx.__file__), "assets")


def get_config():
    c = default_config("modernbert")
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
    # No batch warmup: a step of 32 rows is the whole batch, every step an update (the
    # recipe's step is a micro-batch of 768 rows and its updates take up to 6 of them).
    c.optimizer.accumulate_to, c.optimizer.batch_ramp = 1, 0.0
    books = os.path.join(ASSETS, "text")
    c.data.train_files = ",".join(os.path.join(books, f) for f in (
        "pg1342_pride_and_prejudice.txt", "pg1661_adventures_of_sherlock_holmes.txt"))
    c.data.eval_files = os.path.join(books, "pg11_alice_in_wonderland.txt")
    c.data.tokenizer = os.path.join(ASSETS, "spm_4k.model")
    c.data.lower_case = True  # the bundled vocabulary is lower-cased
    c.data.max_predictions_per_seq = 40  # 30% of 126 is 38
    c.data.eval_mask_prob = 0.15
    return c
