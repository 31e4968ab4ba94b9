"""RoBERTa-base pretraining recipe (Liu et al. 2019): see configs/roberta.py.

    python -m pretrainx.main --config=configs/roberta_base.py --workdir=gs://BUCKET/roberta_base \
        --config.data.train_files='/data/books_wiki_cc_news/*.txt' \
        --config.data.tokenizer=/data/gpt2

Parameters: 124.7M (printed at start; HF's roberta-base is 124.6M with a pooler and
without the MLM head's transform). 500K steps of 8,192 x 512 tokens, lr 6e-4, warmup
24K, Adam b2 0.98, eps 1e-6. The paper trained it on 1024 V100s for a day.
"""

from pretrainx.config import sibling_config


def get_config():
    return sibling_config(__file__, "roberta.py", "base")
