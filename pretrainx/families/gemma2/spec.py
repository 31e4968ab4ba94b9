"""Gemma 2's entry (Gemma Team 2024): the decoder T5Gemma adapts into an encoder-decoder
(soft-capped attention and logits, sliding and global layers alternating), causal LM,
PrefixLM, HF's Gemma2ForCausalLM; built on T5Gemma's blocks (its base)."""

from pretrainx import config as config_lib
from pretrainx import objectives, registry
from pretrainx.objectives import causal_lm, prefix_lm
from pretrainx.errors import UserError
from pretrainx.families.gemma2 import gemma2_clm, hf
from pretrainx.families.gemma2 import model as gemma2


def defaults(objective: str = "gemma2_clm"):
    """The report trains the 2B by distillation on 2T tokens and gives no optimizer values;
    these are gemma3's (the common open ones for continuing a released model), named as
    the drift: AdamW, peak 3e-4 after 2,000 steps, cosine to 10%, 512 rows of 4,096."""
    c = config_lib.shared_config(objective, total_steps=100_000, batch=512, seq_len=4096,
                                 learning_rate=3e-4, schedule="cosine_floor",
                                 warmup_steps=2000, final_lr_fraction=0.1, b2=0.95, eps=1e-8,
                                 weight_decay=0.1)
    c.model = gemma2.default_config()
    c.data.lower_case = False
    return c


def validate(cfg) -> None:
    causal_lm.check_decoder(cfg)
    config_lib.check_positive(cfg, "model.sliding_window", "model.query_pre_attn_scalar")
    if cfg.model.scan_layers:
        raise UserError("model.scan_layers=True is not supported for gemma2: its layers "
                        "alternate sliding and global attention; use False")
    causal_lm.check_causal(cfg)


registry.register(registry.Family(
    name="gemma2", base="t5gemma", outputs=gemma2.outputs,
    default_config=gemma2.default_config, next_token_network=gemma2.Gemma2,
    max_positions="max_position_embeddings",
    objectives=(objectives.Entry(
        name="gemma2_clm", build=gemma2_clm.Gemma2Clm, defaults=defaults, validate=validate,
        as_pretrained=lambda model_cfg, params: (model_cfg, params, "causal_lm")),
        prefix_lm.entry("gemma2", gemma2_clm.Gemma2Clm, lambda name: defaults(name),
                        validate)),
    hf=(hf.ADAPTER,)))
