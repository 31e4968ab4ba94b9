"""Objectives by name: each owns its model head, examples, transform and loss."""

from pretrainx.errors import UserError


def build(cfg, tokenizer):
    if cfg.objective == "bert":
        from pretrainx.objectives.mlm_nsp import MlmNsp
        return MlmNsp(cfg, tokenizer)
    raise UserError(f"config key 'objective' is {cfg.objective!r}; known: bert")
