"""The crammed BERT's recipe at CPU size, over a wall-clock budget, on the bundled novels.

    python -m pretrainx.main --config=configs/crammed_quickstart.py --workdir=/tmp/crammed

Their architecture and training (configs/crammed_bert.py) at the quickstart's parameter
count: 3 layers x 128 (GLU halves of 256), the 4k vocabulary, rows of 128. The budget is
10 minutes (optimizer.budget_hours = 1/6): the learning rate follows the one-cycle
triangle over elapsed time, and the batch ramps from 32 rows to 128 (4 micro-batches
an update) at 60% of it; the run ends when the time is spent. Eval: the unseen Alice at
15% masking (data.eval_mask_prob), as the BERT quickstart's. Measured: see
docs/recipes.md#crammed-bert and benchmarks/recipes.py.
"""

import os

import pretrainx
from pretrainx.objectives import default_config

ASSETS = os.path.join(os.path.dirname(pretrainx.__file__), "assets")


def get_config():
    c = default_config("crammed")
    c.total_steps = 100_000  # an upper bound: the budget ends the run
    c.global_batch_size = 32  # the micro-batch
    c.log_every = 100
    c.eval_every = 100_000  # once, at the end of the budget
    c.eval_steps = 10
    c.checkpoint_every = 100_000
    c.keep_checkpoints = 2
    c.model.update(num_layers=3, hidden_size=128, num_heads=2, mlp_dim=256, vocab_size=4096,
                   dtype="float32")
    c.optimizer.learning_rate = 2e-3  # a 1M-parameter model with minutes to learn in
    c.optimizer.budget_hours = 1 / 6
    c.optimizer.accumulate_to = 4
    books = os.path.join(ASSETS, "text")
    c.data.train_files = ",".join(os.path.join(books, f) for f in (
        "pg1342_pride_and_prejudice.txt", "pg1661_adventures_of_sherlock_holmes.txt"))
    c.data.eval_files = os.path.join(books, "pg11_alice_in_wonderland.txt")
    c.data.tokenizer = os.path.join(ASSETS, "spm_4k.model")
    c.data.eval_mask_prob = 0.15
    return c
