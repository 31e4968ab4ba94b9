"""Qwen3's entry (Qwen Team 2025, "Qwen3 Technical Report"): the decoder (GQA, QK-norm,
SwiGLU, RoPE), causal LM, HF's Qwen3ForCausalLM layout both ways, sampled token by
token from its key-value cache. Its main use here is continuing a released model
(`init_from` an HF folder) and, later, deriving encoders from it."""

from pretrainx import config as config_lib
from pretrainx import objectives, registry
from pretrainx.objectives import causal_lm, mntp, prefix_lm, shifted_mdlm
from pretrainx.families.qwen3 import hf, qwen3_clm
from pretrainx.families.qwen3 import model as qwen3


def defaults(objective: str = "qwen3_clm", causal: bool = True):
    """The report gives the data (about 36T tokens in three stages: 30T at 4,096 tokens,
    a reasoning stage, then long context at 32,768) but not the optimizer's values, so
    these are the common open ones, named as a drift: AdamW (b2 0.95, eps 1e-8, weight
    decay 0.1, clipping 1.0), peak 3e-4 after 2,000 steps, cosine to 10% of it, rows of
    4,096 tokens, 1,024 a step (4M tokens), 1M steps (the first stage's ~4T of 30T)."""
    c = config_lib.shared_config(objective, total_steps=1_000_000, batch=1024,
                                 seq_len=4096, learning_rate=3e-4, schedule="cosine_floor",
                                 warmup_steps=2000, final_lr_fraction=0.1, b2=0.95, eps=1e-8,
                                 weight_decay=0.1)
    c.model = qwen3.default_config(causal=causal)
    c.data.lower_case = False
    return c


def validate(cfg) -> None:
    causal_lm.check_decoder(cfg)
    causal_lm.check_causal(cfg)


registry.register(registry.Family(
    name="qwen3", outputs=qwen3.outputs, default_config=qwen3.default_config,
    causal_sampling=lambda cfg: qwen3.Qwen3(cfg, decode=True),
    next_token_network=qwen3.Qwen3,
    is_causal=lambda model_cfg: bool(model_cfg.causal),
    finetune_model=qwen3.finetune_model, max_positions="max_position_embeddings",
    # made bidirectional, a sentence encoder of mean-pooled states (LLM2Vec, Gemma Encoder)
    sentence_pooling=lambda model_cfg: None if model_cfg.causal else "mean",
    objectives=(objectives.Entry(
        name="qwen3_clm", build=qwen3_clm.Qwen3Clm, defaults=defaults, validate=validate,
        as_pretrained=lambda model_cfg, params: (model_cfg, params, "causal_lm")),
        mntp.entry("qwen3", qwen3_clm.Qwen3Clm,
                   lambda: qwen3.default_config(causal=False), validate),
        shifted_mdlm.entry("qwen3", qwen3_clm.Qwen3Clm,
                           lambda name: defaults(name, causal=False), validate),
        prefix_lm.entry("qwen3", qwen3_clm.Qwen3Clm, lambda name: defaults(name), validate)),
    hf=(hf.ADAPTER,)))
