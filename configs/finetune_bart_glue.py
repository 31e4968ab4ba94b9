"""Fine-tune BART on a GLUE task as fairseq's BART recipe does (examples/bart/README.glue.md).

    python -m pretrainx.main --config=configs/finetune_bart_glue.py --workdir=workdir/bart_sst2 \
        --config.init_from=workdir/bart --config.task=sst2

    # the same task as text to text (label words written by the decoder, as T5 does):
    python -m pretrainx.main --config=configs/finetune_bart_glue.py --workdir=workdir/bart_t2t \
        --config.init_from=workdir/bart --config.task=sst2 --config.text_to_text=True

Classification (Lewis et al. 2020, section 3.1): encoder and decoder both read
<s> a </s> (b </s>), the decoder's input shifted right from </s>, and the decoder's state
at the final </s> feeds a dense + tanh + linear head (BartForSequenceClassification).
Recipe (fairseq's RTE command): Adam betas (0.9, 0.98), eps 1e-8, weight decay 0.01, no
gradient clipping, lr 1e-5 with 6% linear warmup and linear decay to 0, batch 32, 10
epochs, dropout 0.1; the README's table tunes lr (5e-6 to 2e-5) and batch per task.
Expected with bart.large: the paper's dev scores (SST-2 96.6, MNLI 89.9). Measured on
this CPU with a minutes-old bart_quickstart model: docs/finetuning.md#bart.
Drift, named: a pair is framed <s> a </s> b </s> (one separator), as pretrainx frames
RoBERTa's pairs; fairseq writes <s> a </s></s> b </s>.
"""

import os

from pretrainx.finetune.config import finetune_config

_SHARED_GLUE = os.path.normpath(os.path.join(os.path.dirname(os.path.realpath(__file__)),
                                             "..", "..", "shared", "data", "glue"))


def get_config():
    c = finetune_config()
    c.update_from_flattened_dict({
        "task": "sst2", "data.glue_dir": _SHARED_GLUE, "data.lower_case": False,
        "epochs": 10, "global_batch_size": 32, "seq_len": 128,
        # Adam as fairseq runs it for BART: betas (0.9, 0.98), eps 1e-8, no clipping
        "optimizer.learning_rate": 1e-5, "optimizer.warmup_fraction": 0.06,
        "optimizer.b2": 0.98, "optimizer.eps": 1e-8, "optimizer.weight_decay": 0.01,
        "optimizer.grad_clip": 0.0})
    return c
