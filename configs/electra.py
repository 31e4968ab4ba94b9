"""ELECTRA (Clark et al. 2020): replaced token detection.

    python -m pretrainx.main --config=configs/electra.py:small --workdir=gs://BUCKET/electra \
        --config.data.train_files='/data/wiki_books/*.txt' \
        --config.data.tokenizer=/data/bert-base-uncased/vocab.txt

The recipe (the paper's section 3 and Table 6; google-research/electra's
configure_pretraining.py and run_pretraining.py):
* a generator (BERT's encoder + MLM head, 1/4 of the discriminator's hidden size,
  FFN and heads for Small and Large, 1/3 for Base; as many layers) and a
  discriminator (BERT's encoder + a per-token head) trained jointly; the
  generator's samples (softmax, temperature 1, no gradient through the sample)
  replace the masked tokens and the discriminator tells replaced from original;
* loss = MLM + 50 x replaced token detection (the mean over real tokens);
* one embedding block for both (E = 128 for Small, the hidden size otherwise),
  each network projecting E to its width;
* 15% of the tokens masked (25% for Large), 85% of them [MASK], 15% kept;
  [CLS] A [SEP] B [SEP] rows of consecutive sentences of one document, no NSP;
* uncased BERT WordPiece (30,522 ids); Adam b1 0.9, b2 0.999, eps 1e-6, weight
  decay 0.01 (not on LayerNorm and biases), gradients clipped at 1.0, 10K warmup
  steps and a linear decay to 0 at the last step (ELECTRA multiplies the decayed
  rate by step / warmup during warmup, bert_linear uses step / warmup alone:
  1% apart at the end of warmup), dropout 0.1;
* Small: batch 128 x 128 tokens, lr 5e-4, 1M steps; Base: 256 x 512, lr 2e-4,
  766K steps; Large: 2048 x 512, lr 2e-4, 400K steps.
The discriminator is the model to fine-tune: `init_from` of an ELECTRA workdir loads
it (with the shared embeddings) as a BERT encoder.
"""

from pretrainx.objectives import default_config

SIZES = {  # layers, hidden, heads, E, generator size, batch, seq, lr, steps, mask_prob
    "small": (12, 256, 4, 128, 0.25, 128, 128, 5e-4, 1_000_000, 0.15),
    "base": (12, 768, 12, 768, 1 / 3, 256, 512, 2e-4, 766_000, 0.15),
    "large": (24, 1024, 16, 1024, 0.25, 2048, 512, 2e-4, 400_000, 0.25),
}


def get_config(size: str = "small"):
    if size not in SIZES:
        raise ValueError(f"unknown ELECTRA size {size!r}; choose from {', '.join(SIZES)}")
    layers, hidden, heads, e, gen, batch, seq, lr, steps, mask_prob = SIZES[size]
    c = default_config("electra")
    c.model.update(num_layers=layers, hidden_size=hidden, num_heads=heads, mlp_dim=4 * hidden,
                   embedding_size=e, generator_size=gen)
    c.model.dtype = "bfloat16"  # compute; parameters and optimizer state stay float32
    c.global_batch_size, c.seq_len, c.total_steps = batch, seq, steps
    c.optimizer.learning_rate = lr
    c.data.mask_prob = mask_prob
    c.data.max_predictions_per_seq = int((mask_prob + 0.005) * seq)  # ELECTRA's rule
    c.data.tokenizer = ""  # bert-base-uncased's vocab.txt (data.lower_case is True)
    if size != "small":
        c.mesh.data = 1
        c.mesh.fsdp = -1  # FSDP over every device, as the BERT recipes
    return c
