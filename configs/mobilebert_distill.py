"""MobileBERT distilled from its teacher (Sun et al. 2020): layer-by-layer knowledge
transfer, then pretraining distillation.

    python -m pretrainx.main --config=configs/mobilebert_distill.py --workdir=gs://B/mobilebert \
        --config.distill.teacher=gs://B/ib_bert \
        --config.data.train_files='/data/wiki_books/*.txt' \
        --config.data.tokenizer=/data/bert-base-uncased/vocab.txt

paper: the 24-layer MobileBERT from IB-BERT (configs/mobilebert.py:ib_bert, trained first),
as the released TF Model Garden config: 10K steps a layer at a constant 1.5e-3 (240K), each
layer's stage its own run in WORKDIR/transfer_K with a fresh LAMB, then 500K steps of
pretraining distillation in WORKDIR (MLM against 0.5 x the label + 0.5 x the teacher's
softmax, NSP; LAMB 1.5e-3, 10K warmup, linear decay), batch 2,048 x 512.

quickstart: the README quickstart's BERT (L2/H128/A2, /tmp/quickstart) into a MobileBERT of
its width and depth (128 between layers, 32 inside, 2 stacked feed-forward networks of
128, NoNorm, ReLU, 64-wide 3-gram embeddings: 710,274 parameters against the teacher's
1.02M), 400 steps a layer, then 1,700 of distillation, on the quickstart's books:

    python -m pretrainx.main --config=configs/quickstart.py --workdir=/tmp/quickstart
    python -m pretrainx.main --config=configs/mobilebert_distill.py:quickstart \
        --workdir=/tmp/mobilebert_distill --config.distill.teacher=/tmp/quickstart

scratch: the same student trained as plain MobileBERT MLM + NSP for the same 2,500 steps,
what the distilled one is compared with (docs/families.md, MobileBERT: eval MLM accuracy
on the unseen book).
"""

from pretrainx.data import bundled
from pretrainx.objectives import default_config

QUICKSTART_STUDENT = dict(num_layers=2, hidden_size=128, intra_size=32, num_heads=2,
                          mlp_dim=128, num_ffn=2, embedding_size=64, vocab_size=4096,
                          dtype="float32")
LAYER_STEPS = 400


def get_config(size: str = "paper"):
    if size not in ("paper", "quickstart", "scratch"):
        raise ValueError(f"unknown size {size!r}; choose from paper, quickstart, scratch")
    if size == "paper":
        c = default_config("mobilebert_distill")
        c.model.dtype = "bfloat16"
        c.mesh.data, c.mesh.fsdp = 1, -1
        return c
    # the quickstart's data, length, batch and optimizer (configs/quickstart.py)
    c = default_config("mobilebert" if size == "scratch" else "mobilebert_distill")
    c.total_steps = 2500  # the teacher's steps, all stages together
    c.global_batch_size, c.seq_len = 128, 32
    c.log_every, c.eval_every, c.eval_steps = 100, 1250, 10
    c.checkpoint_every, c.keep_checkpoints = 1250, 2
    bundled.use_books(c.data, tokenizer="spm_4k.model")
    c.data.max_predictions_per_seq, c.data.dupe_factor = 5, 5
    c.optimizer.update(name="adamw", learning_rate=1e-3, warmup_steps=100,
                       bias_correction=True, weight_decay=0.01)
    c.model.update(QUICKSTART_STUDENT)
    if size == "quickstart":
        c.distill.layer_steps = LAYER_STEPS
        c.total_steps -= c.model.num_layers * LAYER_STEPS
    return c
