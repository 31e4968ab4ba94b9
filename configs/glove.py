"""GloVe (Pennington, Socher and Manning 2014): word vectors fitted to a corpus's
co-occurrence counts by weighted least squares, glove.c's run.

    python -m pretrainx.main --config=configs/glove.py:cpu --workdir=workdir/glove
    python -m pretrainx.main --config=configs/glove.py --describe   # the paper's size
    python -m pretrainx.export --workdir=workdir/glove --output=DIR  # glove.txt, vectors.txt/.bin
    python -m pretrainx.word_eval --vectors=DIR/vectors.txt           # WordSim, SimLex, analogies

The recipe (300 dimensions, window 10 weighted 1/d, x_max 100, alpha 3/4, AdaGrad at
0.05, min count 5) is `default_config("glove")`; its drift from glove.c (a step's
summed gradient over a batch of entries) is in pretrainx/families/glove/spec.py. A run
needs `data.train_files` (one source) and a word vocabulary of the corpus
(`model.vocab_size` its size):
    python -m pretrainx.tokenizer train --model_type=words --input=... --output=DIR
cpu: the bundled books and their 13,809-word vocabulary (the table padded to 13,824),
100 dimensions (word2vec's cpu size, to compare) and so the paper's 50 epochs (below
300 dimensions) over the training books' co-occurrence entries. Expected: the cost per
entry falling from about 1 to about 0.05 (glove.c prints the same figure); measured in
docs/recipes.md#glove.
"""

from pretrainx.data import bundled
from pretrainx.objectives import default_config

CPU_ENTRIES = 730_871  # the training books' nonzero entries (X over their 3,620 words)
EPOCHS = 50


def get_config(size: str = "original"):
    if size not in ("original", "cpu"):
        raise ValueError(f"unknown GloVe size {size!r}; choose from original, cpu")
    c = default_config("glove")
    if size == "original":
        return c
    c.model.vocab_size = 13_824  # its 13,809 words padded to 128s: the table shards evenly
    c.model.embedding_size = 100
    bundled.use_books(c.data, tokenizer="books.words")
    step_entries = c.global_batch_size * c.seq_len
    c.total_steps = -(-CPU_ENTRIES * EPOCHS // step_entries)
    c.log_every = 200
    c.eval_every = c.total_steps // 2
    c.eval_steps = 20
    c.checkpoint_every = c.total_steps // 2
    c.keep_checkpoints = 2
    return c
