"""DeBERTa-v3 (He et al. 2023): replaced token detection with gradient-disentangled
embedding sharing on DeBERTa's encoder; families/deberta/deberta_rtd.py has the recipe.

    python -m pretrainx.main --config=configs/deberta_v3.py:base --workdir=gs://BUCKET/deberta_v3 \
        --config.data.train_files='/data/corpus/*.txt' --config.data.tokenizer=/data/deberta/spm.model

The sizes are the released checkpoints' (microsoft/deberta-v3-*: 128,100 SentencePiece
ids, 256 position buckets up to 512, generator of half the depth); --describe prints
discriminator_params (backbone + embeddings): xsmall 70.8M (21.5M + 49.2M), small
141.9M (42.9M + 98.4M), base 184.4M (85.4M + 98.4M), large 435.1M (302.8M + 131.2M);
the model cards: 22M + 48M, 44M + 98M, 86M + 98M, 304M + 131M. The recipe values are DeBERTa's (the v3 paper trains "with the same settings as
DeBERTa"; it gives no per-size table): 1M steps of 2K rows of 512 tokens at 2e-4.
"""

from pretrainx.objectives import default_config

SIZES = {  # layers, hidden, heads
    "xsmall": (12, 384, 6),
    "small": (6, 768, 12),
    "base": (12, 768, 12),
    "large": (24, 1024, 16),
}


def get_config(size: str = "base"):
    if size not in SIZES:
        raise ValueError(f"unknown DeBERTa-v3 size {size!r}; choose from {', '.join(SIZES)}")
    layers, hidden, heads = SIZES[size]
    c = default_config("deberta_rtd")
    c.model.num_layers = layers
    c.model.hidden_size = hidden
    c.model.num_heads = heads
    c.model.mlp_dim = 4 * hidden
    c.model.dtype = "bfloat16"  # compute; parameters and optimizer state stay float32
    c.mesh.data = 1
    c.mesh.fsdp = -1
    return c
