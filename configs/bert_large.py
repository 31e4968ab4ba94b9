"""BERT-Large pretraining recipe (Devlin et al. 2019): see configs/bert.py.

    python -m pretrainx.main --config=configs/bert_large.py --workdir=gs://BUCKET/bert_large \
        --config.data.train_files='gs://BUCKET/wiki_books/*.txt' \
        --config.data.tokenizer=gs://BUCKET/bert-base-uncased/vocab.txt

Parameters: 340M (printed at start). The paper trained it on 64 TPU chips (v3-128 territory);
an 8x8 slice is the reference; `python -m pretrainx.plan` gives the estimate.
"""

import importlib.util
import os


def get_config():
    return _bert_recipe("large")


def _bert_recipe(size):
    # The sizes and the recipe live in one file (bert.py) so base and large cannot drift.
    spec = importlib.util.spec_from_file_location(
        "pretrainx_configs_bert", os.path.join(os.path.dirname(__file__), "bert.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(size)
