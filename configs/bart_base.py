"""BART-base pretraining recipe (Lewis et al. 2020): see configs/bart.py.

    python -m pretrainx.main --config=configs/bart_base.py --workdir=gs://BUCKET/bart_base \
        --config.data.train_files='/data/corpus/*.txt' --config.data.tokenizer=/data/gpt2
"""

from pretrainx.config import sibling_config


def get_config():
    return sibling_config(__file__, "bart.py", "base")
