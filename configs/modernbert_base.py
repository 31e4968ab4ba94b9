"""ModernBERT-base pretraining recipe (Warner et al. 2024): see configs/modernbert.py.

    python -m pretrainx.main --config=configs/modernbert_base.py --workdir=gs://BUCKET/mbert \
        --config.data.train_files='/data/text/*.jsonl' --config.data.tokenizer=/data/spm.model

Parameters: 149,655,232 (answerdotai/ModernBERT-base as transformers counts
ModernBertForMaskedLM: 149.7M); 360,277 steps of 4,608 x 1,024 tokens at 8e-4.
"""

from pretrainx.config import sibling_config


def get_config():
    return sibling_config(__file__, "modernbert.py", "base")
