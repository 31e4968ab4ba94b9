"""Distillation on a CPU: the quickstart's BERT (2 layers) distilled into 1 layer.

    python -m pretrainx.main --config=configs/quickstart.py --workdir=/tmp/quickstart
    python -m pretrainx.main --config=configs/distil_quickstart.py --workdir=/tmp/distil \
        --config.distill.teacher=/tmp/quickstart

The teacher is the quickstart's finished run; the student has its width and half its
depth, starts from its embeddings, first layer and MLM head, and trains on the same
two novels with DistilBERT's loss (5.0 KL at T = 2 + 2.0 MLM + 1.0 cosine) at the
quickstart's length, batch and learning rate. Eval reports both networks' MLM accuracy
on the unseen Alice (mlm_accuracy, teacher_mlm_accuracy); measured figures are in
docs/recipes.md.
"""

from pretrainx.data import bundled
from pretrainx.objectives import default_config


def get_config():
    c = default_config("distil")
    c.total_steps = 1000
    c.global_batch_size = 128
    c.seq_len = 32
    c.log_every = 100
    c.eval_every = 500
    c.eval_steps = 10
    c.checkpoint_every = 500
    c.keep_checkpoints = 2

    # The quickstart's model at half its depth (its vocabulary, positions and width).
    c.model.num_layers = 1
    c.model.hidden_size = 128
    c.model.num_heads = 2
    c.model.mlp_dim = 512
    c.model.vocab_size = 4096
    c.model.hidden_act = "gelu_tanh"  # the teacher's (BERT's)
    c.model.dtype = "float32"

    c.optimizer.learning_rate = 1e-3  # the quickstart's
    c.optimizer.warmup_steps = 50

    bundled.use_books(c.data, tokenizer="spm_4k.model")
    c.data.max_predictions_per_seq = 5
    return c
