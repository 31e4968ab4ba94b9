"""BERT-Base with LAMB at batch 64k then 32k (You et al. 2020): see configs/bert_lamb.py.

    python -m pretrainx.main --config=configs/bert_base_lamb.py --workdir=gs://BUCKET/bert_base_lamb \
        --config.data.train_files='/data/wiki_books/*.txt' \
        --config.data.tokenizer=/data/bert-base-uncased/vocab.txt

8,599 steps; planned on v6e:4x4 and v5p:2x2x4 in docs/accelerators.md.
"""

from pretrainx.config import sibling_config


def get_config():
    return sibling_config(__file__, "bert_lamb.py", "base")
