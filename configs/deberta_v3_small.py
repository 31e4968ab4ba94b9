"""DeBERTa-v3-small: see configs/deberta_v3.py.

    python -m pretrainx.main --config=configs/deberta_v3_small.py --workdir=gs://BUCKET/deberta_v3_small \
        --config.data.train_files='/data/corpus/*.txt' --config.data.tokenizer=/data/deberta/spm.model
"""

from pretrainx.config import sibling_config


def get_config():
    return sibling_config(__file__, "deberta_v3.py", "small")
