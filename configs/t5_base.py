"""T5 1.0 Base span-corruption pretraining (Raffel et al. 2020): see configs/t5.py.

    python -m pretrainx.main --config=configs/t5_base.py --workdir=gs://BUCKET/t5_base \
        --config.data.train_files='/data/c4/*.txt' \
        --config.data.tokenizer=/data/t5/spiece.model

T5's own optimizer (Adafactor, inverse square root schedule): configs/t5.py:base,adafactor.
"""

from pretrainx.config import sibling_config


def get_config():
    return sibling_config(__file__, "t5.py", "base")
