"""BERT-Large pretraining recipe (Devlin et al. 2019): see configs/bert.py.

    python -m pretrainx.main --config=configs/bert_large.py --workdir=gs://BUCKET/bert_large \
        --config.data.train_files='/data/wiki_books/*.txt' \
        --config.data.tokenizer=/data/bert-base-uncased/vocab.txt

Parameters: 340M (printed at start). The paper's run took 4 days on 64 TPU chips.
"""

from pretrainx.config import sibling_config


def get_config():
    return sibling_config(__file__, "bert.py", "large")
