"""ELMo (Peters et al. 2018): a character-CNN, 2-layer biLSTM language model.

    python -m pretrainx.main --config=configs/elmo.py:cpu --workdir=workdir/elmo
    python -m pretrainx.main --config=configs/elmo.py --describe      # the paper's size

Sizes (parameters without the softmax, as AllenNLP publishes them):
  original (default): LSTMs of 4096 cells projected to 512, 2,048 char filters,
    2 highway layers: 93.6M; the paper's model, on the 1B Word Benchmark.
  medium: 2048 cells -> 256, 1 highway layer: 28.0M.
  small: 1024 cells -> 128, 1 highway layer: 13.6M.
  cpu: a model that learns on the bundled books in minutes on a CPU: 512 cells ->
    128, 256 filters, 1 highway layer, the 8,192 most frequent words in the softmax.

The recipe (optimizer, rows of 20 words, dropout) is `default_config("elmo")`; see
pretrainx/families/elmo/bilm.py. The paper-size configs need `data.train_files` and a `.words`
vocabulary of the corpus:
    python -m pretrainx.tokenizer train --model_type=words --input=... --output=DIR
"""

from pretrainx.data import bundled
from pretrainx.objectives import default_config


SIZES = {  # lstm_dim, projection_dim, num_highway
    "original": (4096, 512, 2),
    "medium": (2048, 256, 1),
    "small": (1024, 128, 1),
}


def get_config(size: str = "original"):
    if size not in (*SIZES, "cpu"):
        raise ValueError(f"unknown ELMo size {size!r}; choose from {', '.join((*SIZES, 'cpu'))}")
    c = default_config("elmo")
    if size in SIZES:
        c.model.lstm_dim, c.model.projection_dim, c.model.num_highway = SIZES[size]
        c.mesh.data = 1
        c.mesh.fsdp = -1
        return c
    c.total_steps = 800
    c.global_batch_size = 32
    c.seq_len = 20
    c.log_every = 50
    c.eval_every = 400
    c.eval_steps = 10
    c.checkpoint_every = 400
    c.keep_checkpoints = 2
    c.model.filters = "1:16,2:16,3:32,4:64,5:128"
    c.model.num_highway = 1
    c.model.lstm_dim = 512
    c.model.projection_dim = 128
    c.model.vocab_size = 8192
    bundled.use_books(c.data, tokenizer="books.words")
    return c
