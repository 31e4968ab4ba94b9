"""Quickstart: a small BERT learns real English on a CPU in minutes.

    python -m pretrainx.main --config=configs/quickstart.py --workdir=/tmp/quickstart

Data: two public-domain novels bundled in the package (Pride and Prejudice, The
Adventures of Sherlock Holmes) for training; Alice's Adventures in Wonderland,
never seen in training, for evaluation. Vocabulary: a 4,096-piece lower-cased
SentencePiece model trained on the training books
(`python -m pretrainx.tokenizer train --input=... --vocab_size=4096`).

Measured on 2 CPU cores (README): about 6 minutes end to end; MLM loss falls from
8.3 (log 4096) to about 5.9 and eval MLM accuracy on the held-out book reaches about
0.13. The issue's target of 0.25 is not reached yet: at this budget a post-LN BERT
is still on the plateau before its attention learns positions (a count model that
sees both neighbours of every masked piece gets 0.23 on this book).
"""

import os

import pretrainx
from pretrainx.config import default_config

ASSETS = os.path.join(os.path.dirname(pretrainx.__file__), "assets")


def get_config():
    c = default_config()
    c.seed = 0
    c.total_steps = 500
    c.global_batch_size = 32
    c.seq_len = 128
    c.log_every = 50
    c.eval_every = 250
    c.eval_steps = 10
    c.checkpoint_every = 250
    c.keep_checkpoints = 2

    c.model.num_layers = 4
    c.model.hidden_size = 256
    c.model.num_heads = 4
    c.model.mlp_dim = 1024
    c.model.vocab_size = 4096
    c.model.dtype = "float32"

    c.optimizer.learning_rate = 1e-3
    c.optimizer.warmup_steps = 50
    c.optimizer.weight_decay = 0.01
    c.optimizer.grad_clip = 1.0

    books = os.path.join(ASSETS, "text")
    c.data.train_files = ",".join([
        os.path.join(books, "pg1342_pride_and_prejudice.txt"),
        os.path.join(books, "pg1661_adventures_of_sherlock_holmes.txt"),
    ])
    c.data.eval_files = os.path.join(books, "pg11_alice_in_wonderland.txt")
    c.data.tokenizer = os.path.join(ASSETS, "spm_4k.model")
    c.data.max_predictions_per_seq = 20
    c.data.dupe_factor = 5

    c.phase2.fraction = 0.0  # one phase at 128 on a CPU; set 0.1 for the BERT recipe
    c.phase2.seq_len = 512
    c.phase2.global_batch_size = 8
    c.phase2.max_predictions_per_seq = 80
    return c
