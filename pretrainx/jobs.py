"""Which loop trains a config: the fine-tuning loop for a fine-tuning config
(finetune/config.py's), the pretraining loop for every objective's. The CLI and the
sweep runner ask here, so the choice is made in one place."""

from pretrainx import pretrain
from pretrainx.finetune import config as finetune_config
from pretrainx.finetune import loop as finetune_loop


def loop_for(cfg):
    """The module whose `train(cfg, workdir)` and `describe(cfg)` run `cfg`."""
    return finetune_loop if finetune_config.is_finetuning(cfg) else pretrain
