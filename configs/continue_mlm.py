"""Continued (domain-adaptive) pretraining: a released encoder, more masked-LM steps on
your own corpus (what BioBERT and SciBERT did from BERT, and "Don't Stop Pretraining"
from RoBERTa), then fine-tune as usual.

    python -m pretrainx.main --config=configs/continue_mlm.py:bert --workdir=workdir/domain \
        --config.init_from=/models/bert-base-uncased \
        --config.data.train_files='/data/my_corpus/*.txt'

The argument is the family's pretraining objective (bert, roberta, modernbert,
deberta_mlm, albert; t5, bart and causal_lm continue the same way with their own
objective; distil is not one: a student needs a teacher). From init_from (an HF
folder or a pretrainx workdir) come every model key (shapes, activation, tied or
untied output layer, positions) and the tokenizer; the start-up lines list them, and a
key set here that contradicts the folder is refused. The model computes in float32.

The run evaluates the imported model before its first step (the "before") and every
eval_every steps after, on 1% of the corpus's documents held out, so the line at step
0 and the last eval line are the before and after. Our choices, not a paper's: 10,000
steps of 256 rows of 128 tokens (330M tokens), peak rate 1e-4 (BERT's, which trained
at this batch of 256; the families' own peaks go with batches of 2K-8K) after a short
warmup (6%: the weights are trained already; the pretraining recipes' 10,000-step
warmup would leave a short continuation at a tiny rate throughout), linear decay, one
phase. docs/finetuning.md walks through a run.
"""

from pretrainx.objectives import default_config


def get_config(objective: str = "bert"):
    c = default_config(objective)
    c.total_steps = 10_000
    c.global_batch_size = 256
    c.seq_len = 128
    c.optimizer.learning_rate = 1e-4
    c.optimizer.warmup_steps = 600
    c.optimizer.schedule = "warmup_linear"
    c.optimizer.accumulate_to, c.optimizer.batch_ramp = 1, 0.0  # ModernBERT's ramp: off
    c.optimizer.budget_hours = 0.0
    if "max_predictions_per_seq" in c.data:  # masked LMs: a bound that never binds
        c.data.max_predictions_per_seq = round(c.data.mask_prob * c.seq_len) + 1
    c.data.tokenizer = ""  # the folder's
    c.data.eval_split_percent = 1.0
    c.eval_every = 1000
    c.eval_steps = 50
    c.checkpoint_every = 1000
    c.log_every = 100
    if "phase2" in c:
        c.phase2.fraction = 0.0  # one length: the folder's positions bound a second one
    return c
