"""Gemma 3's entry (Gemma Team 2025, "Gemma 3 Technical Report"): the text decoder
(pre- and post-norms, GQA, QK-norm, GeGLU, sqrt(width)-scaled embeddings, five sliding
layers to one global, each with its RoPE base), causal LM, HF's Gemma3ForCausalLM and
Gemma3TextModel layouts both ways, sampled from its key-value cache. Its main use here
is continuing a released model (`init_from` an HF folder) and deriving encoders from
it (`model.causal=False`)."""

from pretrainx import config as config_lib
from pretrainx import objectives, registry
from pretrainx.objectives import causal_lm, mntp, prefix_lm, shifted_mdlm
from pretrainx.errors import UserError
from pretrainx.families.gemma3 import gemma3_clm, hf
from pretrainx.families.gemma3 import model as gemma3


def defaults(objective: str = "gemma3_clm", causal: bool = True):
    """The report trains by distillation from a larger teacher on 2T tokens (the 1B)
    and gives no optimizer values; these are the common open ones for continuing a
    released model, named as a drift: AdamW (b2 0.95, eps 1e-8, weight decay 0.1,
    clipping 1.0), peak 3e-4 after 2,000 steps, cosine to 10% of it, rows of 4,096
    tokens, 512 a step (2M tokens), 100k steps."""
    c = config_lib.shared_config(objective, total_steps=100_000, batch=512, seq_len=4096,
                                 learning_rate=3e-4, schedule="cosine_floor",
                                 warmup_steps=2000, final_lr_fraction=0.1, b2=0.95, eps=1e-8,
                                 weight_decay=0.1)
    c.model = gemma3.default_config(causal=causal)
    c.data.lower_case = False
    return c


def validate(cfg) -> None:
    causal_lm.check_decoder(cfg)
    config_lib.check_positive(cfg, "model.sliding_window", "model.sliding_window_pattern")
    if cfg.model.scan_layers:
        raise UserError("model.scan_layers=True is not supported for gemma3: its layers "
                        "differ (sliding or global attention, two RoPE bases); use False")
    causal_lm.check_causal(cfg)


registry.register(registry.Family(
    name="gemma3", outputs=gemma3.outputs, default_config=gemma3.default_config,
    causal_sampling=lambda cfg: gemma3.Gemma3(cfg, decode=True),
    next_token_network=gemma3.Gemma3,
    is_causal=lambda model_cfg: bool(model_cfg.causal),
    finetune_model=gemma3.finetune_model, max_positions="max_position_embeddings",
    # made bidirectional, a sentence encoder of mean-pooled states (LLM2Vec, Gemma Encoder)
    sentence_pooling=lambda model_cfg: None if model_cfg.causal else "mean",
    sample_framing="bos",
    objectives=(objectives.Entry(
        name="gemma3_clm", build=gemma3_clm.Gemma3Clm, defaults=defaults, validate=validate,
        as_pretrained=lambda model_cfg, params: (model_cfg, params, "causal_lm")),
        mntp.entry("gemma3", gemma3_clm.Gemma3Clm,
                   lambda: gemma3.default_config(causal=False), validate),
        shifted_mdlm.entry("gemma3", gemma3_clm.Gemma3Clm,
                           lambda name: defaults(name, causal=False), validate),
        prefix_lm.entry("gemma3", gemma3_clm.Gemma3Clm, lambda name: defaults(name), validate)),
    hf=(hf.ADAPTER,)))
