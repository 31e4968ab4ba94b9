"""word2vec (Mikolov et al. 2013): skip-gram (or CBOW) with negative sampling,
word2vec.c's run.

    python -m pretrainx.main --config=configs/word2vec.py:cpu --workdir=workdir/word2vec
    python -m pretrainx.main --config=configs/word2vec.py --describe   # word2vec.c's size
    python -m pretrainx.export --workdir=workdir/word2vec --output=DIR  # vectors.txt/.bin

The recipe (100 dimensions, window 5, 5 negatives, subsampling at 1e-3, min count 5,
SGD falling linearly) is `default_config("skipgram")`; its drift from word2vec.c (the
rate, over a batch's mean) is in pretrainx/families/word2vec/spec.py. A run needs
`data.train_files` and a word vocabulary of the corpus (`model.vocab_size` its size):
    python -m pretrainx.tokenizer train --model_type=words --input=... --output=DIR
cpu: the bundled books and their 13,809-word vocabulary (the table padded to 13,824;
3,620 words occur 5 times or more), 120 steps of 8,192 words: about five passes
(word2vec.c's -iter 5) over the 172,056 words the two training books keep after
subsampling. Expected: eval loss per pair 2.80 on the unseen Alice (4.16 at the start),
about 30 s on 2 cores; `sister` nearest to mother, aunt, sisters.
cbow / cbow_cpu: the same with word2vec.c's -cbow 1 (objective "cbow"): expected eval
loss per center 2.75 after cbow_cpu's 120 steps.
"""

from pretrainx.data import bundled
from pretrainx.objectives import default_config


def get_config(size: str = "original"):
    sizes = ("original", "cpu", "cbow", "cbow_cpu")
    if size not in sizes:
        raise ValueError(f"unknown word2vec size {size!r}; choose from {', '.join(sizes)}")
    c = default_config("cbow" if size.startswith("cbow") else "skipgram")
    if size in ("original", "cbow"):
        return c
    c.total_steps = 120
    c.log_every = 10
    c.eval_every = 60
    c.eval_steps = 10
    c.checkpoint_every = 60
    c.keep_checkpoints = 2
    c.model.vocab_size = 13_824  # its 13,809 words padded to 128s: the table shards evenly
    bundled.use_books(c.data, tokenizer="books.words")
    return c
