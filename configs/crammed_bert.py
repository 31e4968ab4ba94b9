"""The crammed BERT (Geiping and Goldstein 2022): a BERT in one GPU-day.

    python -m pretrainx.main --config=configs/crammed_bert.py --workdir=/data/crammed \
        --config.data.train_files='/data/text/*.txt' --config.data.tokenizer=/data/vocab.txt

Their crammed-bert architecture (families/crammed/model.py: pre-LN, no attention or
feed-forward biases, gated GeLU, scaled sinusoidal positions, a final LayerNorm, the
tied decoder at masked positions only; 16 layers x 768) and their bert-o4 training
(families/crammed/crammed_mlm.py: 25% masking, no dropout, AdamW at 1e-3 with b2 0.98,
clipping at 0.5, the one-cycle triangle over 24 hours of wall clock, the batch ramped
from 128 to 8,192 rows at 60% of the budget). `--config.optimizer.budget_hours=H` sets
the budget; total_steps (900,000 micro-batch steps) only bounds it. Their result: GLUE
78.6 (average without WNLI) after a day on one RTX A6000 (table 3, crammed BERT).
"""

from pretrainx.objectives import default_config


def get_config():
    c = default_config("crammed")
    c.model.dtype = "bfloat16"  # compute; parameters and optimizer state stay float32
    return c
