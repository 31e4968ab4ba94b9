"""MobileBERT (Sun et al. 2020): a thin BERT-Large of 24 bottlenecked layers, and its
teacher IB-BERT.

    python -m pretrainx.main --config=configs/mobilebert.py --workdir=gs://BUCKET/mobilebert \
        --config.data.train_files='/data/wiki_books/*.txt' \
        --config.data.tokenizer=/data/bert-base-uncased/vocab.txt

The argument picks the model, as google-research/mobilebert's config files give them
(uncased, BERT's 30,522 WordPiece ids, 128-wide embeddings read as 3-grams, 4 heads,
24 layers passing 512-wide states between them):
* mobilebert (uncased_L-24_H-128_B-512_A-4_F-4_OPT): 128 wide inside each layer, 4
  stacked feed-forward networks of 512, queries and keys from a shared 128-wide
  bottleneck, NoNorm, ReLU, no dropout but attention's: 24,581,888 parameters without
  heads, as HF's MobileBertModel counts them (the paper's table 1 says 25.3M);
* tiny (..._F-2_tiny_OPT): 2 feed-forward networks, queries, keys and values from the
  input bottleneck: 15,485,696 (the paper: 15.1M);
* ib_bert (uncased_L-24_H-1024_B-512_A-4, the teacher): an inverted bottleneck 1,024
  wide inside, one feed-forward network of 4,096, LayerNorm, GeLU, dropout 0.1.
The run is the released distillation command's optimizer and data (LAMB 1.5e-3, 10K
warmup steps, 500K steps of 2,048 x 512 tokens, 20 predictions a row) as plain MLM + NSP:
how IB-BERT is trained, and MobileBERT without a teacher. configs/mobilebert_distill.py
distils MobileBERT from IB-BERT as the paper does.
"""

from pretrainx.objectives import default_config

SIZES = {  # intra, mlp, feed-forwards, norm, act, dropout, shared q/k, bottleneck attention
    "mobilebert": (128, 512, 4, "no_norm", "relu", 0.0, True, False),
    "tiny": (128, 512, 2, "no_norm", "relu", 0.0, False, True),
    "ib_bert": (1024, 4096, 1, "layer_norm", "gelu", 0.1, False, False),
}


def get_config(size: str = "mobilebert"):
    if size not in SIZES:
        raise ValueError(f"unknown MobileBERT size {size!r}; choose from {', '.join(SIZES)}")
    intra, mlp, ffn, norm, act, dropout, shared, bottleneck_attention = SIZES[size]
    c = default_config("mobilebert")
    c.model.update(intra_size=intra, mlp_dim=mlp, num_ffn=ffn, normalization=norm, hidden_act=act,
                   dropout_rate=dropout, key_query_shared_bottleneck=shared,
                   bottleneck_attention=bottleneck_attention,
                   classifier_activation=size == "ib_bert")
    c.model.dtype = "bfloat16"  # compute; parameters and optimizer state stay float32
    c.mesh.data = 1
    c.mesh.fsdp = -1
    return c
