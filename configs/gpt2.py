"""GPT-2 (Radford et al. 2019) at its published sizes, causal LM on packed documents.

    python -m pretrainx.main --config=configs/gpt2.py:small --workdir=gs://BUCKET/gpt2 \
        --config.data.train_files='/data/webtext/*.jsonl' \
        --config.data.tokenizer=/data/gpt2      # vocab.json + merges.txt

Sizes: small (124M: 12 layers, d 768), medium (355M: 24, 1024), large (774M: 36,
1280), xl (1.5B: 48, 1600); 50,257 byte-level BPE tokens, context 1024, batch 512.
The recipe is `default_config("causal_lm")` (see pretrainx/families/gpt2/causal_lm.py): Adam at
2.5e-4 with 2,000 warmup steps and cosine decay, weight decay 0.01, dropout 0.1.
"""

from pretrainx.objectives import default_config

SIZES = {  # layers, d_model, heads
    "small": (12, 768, 12),
    "medium": (24, 1024, 16),
    "large": (36, 1280, 20),
    "xl": (48, 1600, 25),
}


def get_config(size: str = "small"):
    if size not in SIZES:
        raise ValueError(f"unknown GPT-2 size {size!r}; choose from {', '.join(SIZES)}")
    layers, d_model, heads = SIZES[size]
    c = default_config("causal_lm")
    c.model.num_layers = layers
    c.model.hidden_size = d_model
    c.model.num_heads = heads
    c.model.mlp_dim = 4 * d_model
    c.model.dtype = "bfloat16"  # compute; parameters and optimizer state stay float32
    c.mesh.data = 1
    c.mesh.fsdp = -1  # FSDP over every device, as the BERT and T5 recipes
    return c
