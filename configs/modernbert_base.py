"""ModernBERT-base pretraining recipe (Warner et al. 2024): see configs/modernbert.py.

    python -m pretrainx.main --config=configs/modernbert_base.py --workdir=gs://BUCKET/mbert \
        --config.data.train_files='/data/text/*.jsonl' --config.data.tokenizer=/data/spm.model

Parameters: 149,655,232 (answerdotai/ModernBERT-base as transformers counts
ModernBertForMaskedLM: 149.7M); 2,543,132 steps of one micro-batch of 786,432 tokens
(2T): `pretrain`, 1.7T tokens at 1,024 and 8e-4, updates of 768 rows rising to 4,608
over the first 50B; `extension`, 250B at 8,192 and 3e-4 with the global RoPE base
160,000; `decay`, 50B of 1 - sqrt decay.
"""

from pretrainx.config import sibling_config


def get_config():
    return sibling_config(__file__, "modernbert.py", "base")
