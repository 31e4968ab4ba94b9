"""RoBERTa (Liu et al. 2019): BERT's encoder trained with masked LM only.

    python -m pretrainx.main --config=configs/roberta.py:base --workdir=gs://BUCKET/roberta \
        --config.data.train_files='/data/books_wiki_cc_news/*.txt' \
        --config.data.tokenizer=/data/gpt2      # vocab.json + merges.txt (GPT-2's or RoBERTa's)

What differs from BERT, as the paper's section 4 sets it:
* no next-sentence prediction; rows are FULL-SENTENCES: whole sentences packed
  contiguously to 512 tokens, running on across documents with </s> between them,
  each row <s> ... </s>;
* dynamic masking: a new mask every time a row is seen (15%, 80/10/10);
* byte-level BPE: GPT-2's 50,257 pieces + <s> <pad> </s> <unk> and <mask> (50,265 ids;
  with GPT-2's files the ids take fairseq's layout, see data/bpe.py:RobertaLayout);
* large batches: 8K sequences of 512 tokens, 500K steps (the paper's final base
  recipe, 4.2M tokens a batch); Adam b1 0.9, b2 0.98, eps 1e-6, weight decay 0.01,
  peak lr 6e-4 (base) / 4e-4 (large) after 24K (base) / 30K (large) warmup steps,
  linear decay to 0; dropout 0.1; no gradient clipping (fairseq's --clip-norm 0);
* the model: BERT's post-LN encoder with exact GeLU, LayerNorm eps 1e-5, one token
  type, 514 learned positions numbered from 2 (fairseq's padding_idx + 1, as HF's
  RobertaModel), the MLM head tied to the embeddings; no pooler.
"""

from pretrainx.objectives import default_config

SIZES = {  # layers, hidden, heads, peak lr, warmup steps
    "base": (12, 768, 12, 6e-4, 24_000),
    "large": (24, 1024, 16, 4e-4, 30_000),
}


def get_config(size: str = "base"):
    if size not in SIZES:
        raise ValueError(f"unknown RoBERTa size {size!r}; choose from {', '.join(SIZES)}")
    layers, hidden, heads, lr, warmup = SIZES[size]
    c = default_config("roberta")
    c.model.num_layers = layers
    c.model.hidden_size = hidden
    c.model.num_heads = heads
    c.model.mlp_dim = 4 * hidden
    c.model.dtype = "bfloat16"  # compute; parameters and optimizer state stay float32
    c.optimizer.learning_rate = lr
    c.optimizer.warmup_steps = warmup
    c.mesh.data = 1
    c.mesh.fsdp = -1  # FSDP over every device, as the BERT recipes
    return c
