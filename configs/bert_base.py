"""BERT-Base pretraining recipe (Devlin et al. 2019): see configs/bert.py.

    python -m pretrainx.main --config=configs/bert_base.py --workdir=gs://BUCKET/bert_base \
        --config.data.train_files='/data/wiki_books/*.txt' \
        --config.data.tokenizer=/data/bert-base-uncased/vocab.txt

Parameters: 110M (printed at start). The paper's run took 4 days on 16 TPU chips.
"""

from pretrainx.config import sibling_config


def get_config():
    return sibling_config(__file__, "bert.py", "base")
