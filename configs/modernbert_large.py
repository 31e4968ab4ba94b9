"""ModernBERT-large pretraining recipe (Warner et al. 2024): see configs/modernbert.py.

    python -m pretrainx.main --config=configs/modernbert_large.py --workdir=gs://BUCKET/mbert_l \
        --config.data.train_files='/data/text/*.jsonl' --config.data.tokenizer=/data/spm.model

Parameters: 395,881,664 (answerdotai/ModernBERT-large as transformers counts
ModernBertForMaskedLM: 395.9M); 4,359,654 steps of one micro-batch of 458,752 tokens
(2T): `pretrain`, 900B at 1,024 and 5e-4, updates of 448 rows rising to 4,928 over the
first 10B; `restart`, 800B at 5e-5; `extension`, 250B at 8,192 and 5e-5 with the global
RoPE base 160,000; `decay`, 50B of 1 - sqrt decay.
"""

from pretrainx.config import sibling_config


def get_config():
    return sibling_config(__file__, "modernbert.py", "large")
