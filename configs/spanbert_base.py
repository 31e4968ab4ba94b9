"""SpanBERT-base pretraining recipe (Joshi et al. 2020): see configs/spanbert.py.

    python -m pretrainx.main --config=configs/spanbert_base.py --workdir=gs://BUCKET/spanbert_base \
        --config.data.train_files='/data/wiki_books/*.txt' \
        --config.data.tokenizer=/data/bert-base-cased/vocab.txt

Parameters: 110.7M (printed at start): BERT-base with the cased vocabulary and the MLM
head (108.3M) + the SBO head (2.4M). 2.4M steps of 256 x 512 tokens, lr 1e-4.
"""

from pretrainx.config import sibling_config


def get_config():
    return sibling_config(__file__, "spanbert.py", "base")
