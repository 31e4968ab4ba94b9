"""BART (Lewis et al. 2020): a denoising encoder-decoder, the paper's final recipe.

    python -m pretrainx.main --config=configs/bart.py:base --workdir=gs://BUCKET/bart \
        --config.data.train_files='/data/corpus/*.txt' --config.data.tokenizer=/data/gpt2

What the paper sets (sections 2, 3.2 and 5): the released bart.base (6 + 6 layers,
768 wide) and bart.large (12 + 12, 1024 wide); post-LN blocks with GELU, a LayerNorm on
the embeddings, learned positions from 2 (fairseq's offset), tied input/output
embeddings; GPT-2's byte-level BPE in fairseq's layout (50,265 ids); text infilling
(30% of the tokens in Poisson(3) spans, each one <mask>) plus sentence permutation; the
decoder reconstructs the original. Large: batch 8,000 x 512 tokens for 500K steps, as
RoBERTa. The optimizer is fairseq's for RoBERTa/BART (Adam b2 0.98, eps 1e-6, weight
decay 0.01, linear decay after warmup, no clipping). The paper does not state the
learning rate; 4e-4 with 10K warmup steps is RoBERTa-large's, named here as a drift.
Parameters (--describe): base 139,470,681, large 406,341,721: transformers'
BartForConditionalGeneration counts plus the 50,265-value final_logits_bias it keeps
as a buffer.
"""

from pretrainx.objectives import default_config

SIZES = {  # layers (each stack), hidden, heads, ffn
    "base": (6, 768, 12, 3072),
    "large": (12, 1024, 16, 4096),
}


def get_config(size: str = "large"):
    if size not in SIZES:
        raise ValueError(f"unknown BART size {size!r}; choose from {', '.join(SIZES)}")
    layers, hidden, heads, ffn = SIZES[size]
    c = default_config("bart")
    c.model.num_layers = layers
    c.model.num_decoder_layers = layers
    c.model.hidden_size = hidden
    c.model.num_heads = heads
    c.model.mlp_dim = ffn
    c.model.dtype = "bfloat16"  # compute; parameters and optimizer state stay float32
    c.mesh.data = 1
    c.mesh.fsdp = -1
    return c
