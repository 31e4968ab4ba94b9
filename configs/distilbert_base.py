"""DistilBERT-base (Sanh et al. 2019): bert-base-uncased distilled into 6 layers.

    python -m pretrainx.main --config=configs/distilbert_base.py --workdir=gs://BUCKET/distilbert \
        --config.distill.teacher=gs://BUCKET/bert_base      # or an HF bert-base-uncased dir
        --config.data.train_files='/data/books_wiki/*.txt' \
        --config.data.tokenizer=/data/bert-base-uncased/vocab.txt

The student: BERT-Base's width, half its depth (6 layers), no token-type table, no
pooler or NSP (--describe: student_encoder_params 66.4M, DistilBERT's 66M; 67.0M with
the MLM head). It starts from one teacher layer in two and its embeddings, and learns
from 5.0 x KL(T = 2) + 2.0 x MLM + 1.0 x cosine on FULL-SENTENCES rows of 512 tokens,
4K a batch; families/distilbert/distil_mlm.py has the recipe and docs/recipes.md the drifts.
The paper reports 97% of BERT-Base's GLUE score (77.0 vs 79.5) at 60% faster inference.
"""

from pretrainx.objectives import default_config


def get_config():
    return default_config("distil")
