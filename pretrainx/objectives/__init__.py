"""Objectives by name: each owns its model head, examples, transform and loss."""

from pretrainx.errors import UserError


def build(cfg, tokenizer):
    if cfg.objective == "bert":
        from pretrainx.objectives.mlm_nsp import MlmNsp
        return MlmNsp(cfg, tokenizer)
    if cfg.objective == "t5":
        from pretrainx.objectives.span_corruption import SpanCorruption
        return SpanCorruption(cfg, tokenizer)
    if cfg.objective == "causal_lm":
        from pretrainx.objectives.causal_lm import CausalLM
        return CausalLM(cfg, tokenizer)
    raise UserError(f"config key 'objective' is {cfg.objective!r}; known: bert, t5, causal_lm")
