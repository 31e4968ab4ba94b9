"""ALBERT (Lan et al. 2020): a BERT with far fewer parameters, trained with n-gram
masked LM and sentence-order prediction.

    python -m pretrainx.main --config=configs/albert.py:base --workdir=gs://BUCKET/albert \
        --config.data.train_files='/data/wiki_books/*.txt' \
        --config.data.tokenizer=/data/albert/30k-clean.model   # lower-cased SentencePiece

What differs from BERT, as the paper (and google-research/albert, v2) sets it:
* factorised embeddings: 30,000 x 128 word embeddings (and 128-wide positions,
  types and LayerNorm), projected 128 -> hidden before the first layer; the MLM
  head maps hidden -> 128 and decodes with the tied 128-wide table
  (model.embedding_size = 128);
* cross-layer sharing: one layer's attention and feed-forward parameters applied
  at every depth (model.share_layers = True);
* sentence-order prediction instead of NSP: two consecutive segments of one
  document, swapped half of the time;
* n-gram masking: 15% of the tokens, in whole-word n-grams with p(n) = 6/11, 3/11,
  2/11 for n = 1, 2, 3; 80/10/10 per token;
* 125K steps of 4,096 x 512 tokens (10% of the pairs shorter), LAMB with peak lr
  0.00176 after 3,125 warmup steps, linear decay to 0, weight decay 0.01 (not on
  LayerNorm or biases, which also skip the trust ratio), b1 0.9, b2 0.999, eps 1e-6,
  gradients clipped at norm 1; dropout 0 (ALBERT v2; v1 used 0.1); GELU in its
  tanh form (albert's modeling.py, HF's gelu_new).

The argument picks the size (the paper's table 1; all E = 128): base (L12/H768,
12M), large (L24/H1024, 18M), xlarge (L24/H2048, 60M), xxlarge (L12/H4096, 235M).
"""

from pretrainx.objectives import default_config

SIZES = {  # layers, hidden, heads, mlp
    "base": (12, 768, 12, 3072),
    "large": (24, 1024, 16, 4096),
    "xlarge": (24, 2048, 16, 8192),
    "xxlarge": (12, 4096, 64, 16384),
}


def get_config(size: str = "base"):
    if size not in SIZES:
        raise ValueError(f"unknown ALBERT size {size!r}; choose from {', '.join(SIZES)}")
    layers, hidden, heads, mlp = SIZES[size]
    c = default_config("albert")
    c.model.num_layers = layers
    c.model.hidden_size = hidden
    c.model.num_heads = heads
    c.model.mlp_dim = mlp
    c.model.dtype = "bfloat16"  # compute; parameters and optimizer state stay float32
    c.mesh.data = 1
    c.mesh.fsdp = -1  # FSDP over every device, as the BERT recipes
    return c
