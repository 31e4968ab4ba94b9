"""SpanBERT (Joshi et al. 2020): span masking and the span boundary objective (SBO).

    python -m pretrainx.main --config=configs/spanbert.py:base --workdir=gs://BUCKET/spanbert \
        --config.data.train_files='/data/wiki_books/*.txt' \
        --config.data.tokenizer=/data/bert-base-cased/vocab.txt

The paper's recipe (section 4.1 and appendix; its fairseq implementation):
* BERT's architecture and its cased WordPiece vocabulary (28,996 pieces);
* single segments of up to 512 tokens from one document, no NSP;
* span masking: lengths in whole words from Geo(0.2) cut at 10 (mean 3.8), a uniform
  start, until 15% of the tokens are masked; 80/10/10 decided per span;
* loss = MLM + SBO (a 2-layer GeLU + LayerNorm head on the boundary tokens and a
  relative position embedding, decoding through the tied embedding);
* AdamW lr 1e-4, b1 0.9, b2 0.999, eps 1e-6 (the paper says Adam with BERT's
  settings; eps 1e-6 as the fairseq recipe), weight decay 0.01, 10K warmup steps
  then linear decay, dropout 0.1, exact GeLU, batch 256 sequences of 512 tokens,
  2.4M steps.
"""

from pretrainx.objectives import default_config

SIZES = {  # layers, hidden, heads
    "base": (12, 768, 12),
    "large": (24, 1024, 16),
}


def get_config(size: str = "base"):
    if size not in SIZES:
        raise ValueError(f"unknown SpanBERT size {size!r}; choose from {', '.join(SIZES)}")
    layers, hidden, heads = SIZES[size]
    c = default_config("spanbert")
    c.model.num_layers = layers
    c.model.hidden_size = hidden
    c.model.num_heads = heads
    c.model.mlp_dim = 4 * hidden
    c.model.dtype = "bfloat16"  # compute; parameters and optimizer state stay float32
    c.mesh.data = 1
    c.mesh.fsdp = -1  # FSDP over every device, as the BERT recipes
    c.data.tokenizer = ""  # bert-base-cased's vocab.txt (data.lower_case is False)
    return c
