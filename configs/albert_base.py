"""ALBERT-base (v2) pretraining recipe (Lan et al. 2020): see configs/albert.py.

    python -m pretrainx.main --config=configs/albert_base.py --workdir=gs://BUCKET/albert_base \
        --config.data.train_files='/data/wiki_books/*.txt' \
        --config.data.tokenizer=/data/albert/30k-clean.model

Parameters: 11.8M (printed at start; HF's AlbertForPreTraining for albert-base-v2
has the same 11,813,810, its AlbertModel 11,683,584). 125K steps of 4,096 x 512
tokens, LAMB lr 0.00176, warmup 3,125, dropout 0.
"""

from pretrainx.config import sibling_config


def get_config():
    return sibling_config(__file__, "albert.py", "base")
