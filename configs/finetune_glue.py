"""Fine-tune BERT on a GLUE task with the paper's recipe.

    python -m pretrainx.main --config=configs/finetune_glue.py --workdir=workdir/sst2 \
        --config.task=sst2 --config.init_from=workdir/quickstart \
        --config.data.glue_dir=/data/glue

`init_from`: a pretraining workdir (its latest checkpoint), a fine-tuning workdir
(its best epoch), or a HuggingFace BERT directory (e.g. an export of ours, or
bert-base-uncased downloaded beforehand). Tasks: cola sst2 mrpc qqp stsb mnli qnli
rte wnli, with GLUE's metrics (Matthews correlation for CoLA, F1 and accuracy for
MRPC/QQP, Pearson and Spearman for STS-B, accuracy otherwise).

Recipe (Devlin et al. 2019, section 4.1 and appendix A.3): batch 32, 3 epochs,
AdamW lr 2e-5 (search 5e-5, 3e-5, 2e-5), linear warmup over the first 10% of steps
then linear decay to 0, weight decay 0.01, dropout 0.1, length 128. Dev metrics
after each epoch; the best epoch is kept in WORKDIR/best and predicts the test
set into WORKDIR/predictions/ in GLUE's submission format.

Parameter-efficient tuning: --config.peft.method=lora|adapter|prefix|prompt (with
peft.lora_rank/alpha/dropout/targets, peft.adapter_size, peft.num_virtual_tokens);
those methods usually want a larger learning rate (e.g. 5e-4 for LoRA).
"""

import os

from pretrainx.finetune.config import finetune_config

# The GLUE files that ship beside this repository (../shared/data/glue), if present.
_SHARED_GLUE = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                             "..", "..", "shared", "data", "glue"))


def get_config():
    c = finetune_config()
    c.task = "sst2"
    c.data.glue_dir = _SHARED_GLUE
    c.epochs = 3
    c.global_batch_size = 32
    c.seq_len = 128
    c.optimizer.learning_rate = 2e-5
    c.optimizer.warmup_fraction = 0.1
    return c
