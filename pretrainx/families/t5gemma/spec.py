"""T5Gemma's entry (Zhang et al. 2025): Gemma 2 blocks as an encoder-decoder, trained on
UL2's mixture (or its S denoiser alone: PrefixLM), HF's T5GemmaForConditionalGeneration
layout; built on the T5 family's data recipe (its base)."""

import ml_collections

from pretrainx import config as config_lib
from pretrainx import objectives, registry
from pretrainx.objectives import logit_distill
from pretrainx.errors import UserError
from pretrainx.families.t5 import spec as t5_spec
from pretrainx.families.t5gemma import adapt, hf, t5gemma_ul2
from pretrainx.families.t5gemma import model as t5gemma


def defaults():
    """T5Gemma 2B-2B on UL2's mixture at T5's run (the paper adapts released Gemma 2
    checkpoints; configs/t5gemma.py sets its sizes)."""
    c = t5_spec.ul2_defaults("t5gemma_ul2", model=t5gemma.default_config())
    c.adapt = ml_collections.ConfigDict()
    c.adapt.encoder_from = ""  # a Gemma 2 (workdir or HF folder) the encoder starts from
    c.adapt.decoder_from = ""  # the decoder's ("": the encoder's)
    c.distill = ml_collections.ConfigDict()  # PrefixLM + KD: a causal teacher (Gemma 2)
    logit_distill.defaults(c)
    return c


def validate(cfg) -> None:
    m = cfg.model
    for prefix in ("", "decoder_"):
        config_lib.check_positive(cfg, *(f"model.{prefix}{k}" for k in (
            "hidden_size", "mlp_dim", "num_heads", "num_kv_heads", "head_dim",
            "query_pre_attn_scalar", "sliding_window")))
        if m[prefix + "num_heads"] % m[prefix + "num_kv_heads"]:
            raise UserError(f"model.{prefix}num_heads={m[prefix + 'num_heads']} is not a "
                            f"multiple of model.{prefix}num_kv_heads="
                            f"{m[prefix + 'num_kv_heads']}")
    config_lib.check_positive(cfg, "model.num_layers", "model.num_decoder_layers")
    if m.attn_logit_softcapping < 0 or m.final_logit_softcapping < 0:
        raise UserError("model.attn_logit_softcapping and model.final_logit_softcapping "
                        "must be >= 0 (0: none)")
    t5_spec.check_ul2_data(cfg)
    logit_distill.validate(cfg)
    d = cfg.data
    if cfg.get("distill") and cfg.distill.teacher and (
            [x.strip() for x in str(d.denoisers).split(",")] != ["S"] or d.mode_tokens):
        raise UserError(f"distill.teacher reads PrefixLM rows: set data.denoisers=S (it is "
                        f"{d.denoisers!r}), data.denoiser_weights=1 and data.mode_tokens= "
                        f"(it is {d.mode_tokens!r})")


def imports(cfg) -> dict:
    """The Gemma 2 decoders adapt.* names and the teacher distill.teacher names."""
    return {**adapt.imports(cfg), **logit_distill.imports(cfg)}


registry.register(registry.Family(
    name="t5gemma", base="t5", default_config=t5gemma.default_config, outputs=t5gemma.outputs,
    finetune_model=lambda cfg, head, num_labels, peft: t5gemma.T5Gemma(cfg),
    text_to_text="always", generate=t5gemma.generate,
    objectives=(objectives.Entry(
        name="t5gemma_ul2", build=t5gemma_ul2.T5GemmaUl2, defaults=defaults,
        validate=validate, imports=imports,
        as_pretrained=lambda model_cfg, params: (
            model_cfg, logit_distill.student_params(params), "seq2seq"),
        from_pretrained=lambda params, fresh: {"student": params} if "teacher" in fresh
        else params),),
    hf=(hf.ADAPTER,)))
