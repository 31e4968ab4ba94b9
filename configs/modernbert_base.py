"""ModernBERT-base pretraining recipe (Warner et al. 2024): see configs/modernbert.py.

    python -m pretrainx.main --config=configs/modernbert_base.py --workdir=gs://BUCKET/mbert \
        --config.data.train_files='/data/text/*.jsonl' --config.data.tokenizer=/data/spm.model

Parameters: 149,655,232 (answerdotai/ModernBERT-base as transformers counts
ModernBertForMaskedLM: 149.7M); 2,161,662 steps of one 768 x 1,024-token micro-batch
(1.7T tokens) at 8e-4, updates of 768 rows rising to 4,608 over the first 50B tokens.
"""

from pretrainx.config import sibling_config


def get_config():
    return sibling_config(__file__, "modernbert.py", "base")
