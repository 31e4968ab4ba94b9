"""BART at CPU size: the denoising recipe on the bundled novels, in minutes.

    python -m pretrainx.main --config=configs/bart_quickstart.py --workdir=/tmp/bart
    python -m pretrainx.data --config=configs/bart_quickstart.py --stats --show=2

The objective is the paper's (text infilling at 30% with Poisson(3) spans, sentence
permutation, the decoder writing the original); the model is 2 + 2 layers 128 wide, at
length 64, and the vocabulary GPT-2's byte-level BPE in fairseq's layout, read from
../shared/data/tokenizers/gpt2 (the BPE files ship beside this repository, not in the
package). Training: Pride and Prejudice and The Adventures of Sherlock Holmes; eval:
Alice's Adventures in Wonderland. Measured: see docs/recipes.md#bart.
"""

import os

import pretrainx
from pretrainx.objectives import default_config

ASSETS = os.path.join(os.path.dirname(pretrainx.__file__), "assets")
GPT2 = os.path.normpath(os.path.join(
    os.path.dirname(os.path.realpath(__file__)), "..", "..", "shared", "data",
    "tokenizers", "gpt2"))


def get_config():
    c = default_config("bart")
    c.total_steps = 400
    c.global_batch_size = 16
    c.seq_len = 64  # 1,024 target tokens a step: the 50,265-way softmax is most of the work
    c.log_every = 50
    c.eval_every = 200
    c.eval_steps = 8
    c.checkpoint_every = 200
    c.keep_checkpoints = 2
    c.model.update(num_layers=2, num_decoder_layers=2, hidden_size=128, num_heads=2,
                   mlp_dim=512, max_position_embeddings=64, dtype="float32")
    c.optimizer.learning_rate = 1e-3  # a 7M-parameter model with minutes to learn in
    c.optimizer.warmup_steps = 50
    books = os.path.join(ASSETS, "text")
    c.data.train_files = ",".join(os.path.join(books, f) for f in (
        "pg1342_pride_and_prejudice.txt", "pg1661_adventures_of_sherlock_holmes.txt"))
    c.data.eval_files = os.path.join(books, "pg11_alice_in_wonderland.txt")
    c.data.tokenizer = GPT2
    return c
