"""ModernBERT-large pretraining recipe (Warner et al. 2024): see configs/modernbert.py.

    python -m pretrainx.main --config=configs/modernbert_large.py --workdir=gs://BUCKET/mbert_l \
        --config.data.train_files='/data/text/*.jsonl' --config.data.tokenizer=/data/spm.model

Parameters: 395,881,664 (answerdotai/ModernBERT-large as transformers counts
ModernBertForMaskedLM: 395.9M); 3,705,706 steps of one 448 x 1,024-token micro-batch
(1.7T tokens) at 5e-4, updates of 448 rows rising to 4,928 over the first 10B tokens.
"""

from pretrainx.config import sibling_config


def get_config():
    return sibling_config(__file__, "modernbert.py", "large")
