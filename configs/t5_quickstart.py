"""T5 quickstart: a small T5 1.1-style model learns span corruption on a CPU in minutes.

    python -m pretrainx.main --config=configs/t5_quickstart.py --workdir=/tmp/t5_quickstart
    python -m pretrainx.data --config=configs/t5_quickstart.py --stats

Data: the two bundled public-domain novels for training, Alice's Adventures in
Wonderland (never seen in training) for evaluation. Vocabulary: a cased 4,000-piece
SentencePiece model in T5's layout (<pad>=0, </s>=1, <unk>=2) trained on the
training books (`python -m pretrainx.tokenizer train --style=t5 --lower_case=false
--vocab_size=4000 ...`), plus T5's 100 sentinels: 4,100 ids in 4,224 rows.
Span corruption and packing are the recipe's: inputs 512 (568 raw tokens),
targets 114.
"""

from pretrainx.data import bundled
from pretrainx.objectives import default_config


def get_config():
    c = default_config("t5")
    c.total_steps = 300
    c.global_batch_size = 8
    c.log_every = 25
    c.eval_every = 150
    c.eval_steps = 4
    c.checkpoint_every = 150
    c.keep_checkpoints = 2

    c.model.num_layers = 2
    c.model.num_decoder_layers = 2
    c.model.hidden_size = 256
    c.model.num_heads = 4
    c.model.mlp_dim = 512
    c.model.vocab_size = 4224  # 4,000 pieces + 100 sentinels, padded to 128
    c.model.feed_forward = "gated-gelu"
    c.model.tie_output = False
    c.model.dropout_rate = 0.0
    c.model.dtype = "float32"

    c.optimizer.learning_rate = 3e-3
    c.optimizer.warmup_steps = 30

    bundled.use_books(c.data, tokenizer="spm_t5_4k.model")
    return c
