"""Objectives by name: each owns its model head, examples, transform and loss."""

import importlib

from pretrainx.errors import UserError

# config key `objective` -> (module, class); config.OBJECTIVES lists the same names.
REGISTRY = {
    "bert": ("pretrainx.objectives.mlm_nsp", "MlmNsp"),
    "t5": ("pretrainx.objectives.span_corruption", "SpanCorruption"),
    "causal_lm": ("pretrainx.objectives.causal_lm", "CausalLM"),
    "roberta": ("pretrainx.objectives.roberta_mlm", "RobertaMlm"),
    "spanbert": ("pretrainx.objectives.span_mlm", "SpanMlm"),
    "elmo": ("pretrainx.objectives.bilm", "BiLM"),
    "electra": ("pretrainx.objectives.electra_rtd", "ElectraRtd"),
    "albert": ("pretrainx.objectives.albert_mlm_sop", "AlbertMlmSop"),
}


def build(cfg, tokenizer):
    if cfg.objective not in REGISTRY:
        raise UserError(f"config key 'objective' is {cfg.objective!r}; known: "
                        f"{', '.join(REGISTRY)}")
    module, name = REGISTRY[cfg.objective]
    return getattr(importlib.import_module(module), name)(cfg, tokenizer)
