"""DeBERTa's entry (He et al. 2021, 2023): its disentangled-attention encoder and
fine-tuning head, two objectives (v1/v2's MLM with the enhanced mask decoder, v3's
replaced token detection) on the paper's shared settings, HF's DebertaV2 layout."""

from pretrainx import config as config_lib
from pretrainx import objectives, registry
from pretrainx.errors import UserError
from pretrainx.families.deberta import deberta_mlm, deberta_rtd, hf
from pretrainx.families.deberta import model as deberta
from pretrainx.families.deberta import rtd_model
from pretrainx.objectives import encoder


def paper_defaults(objective: str, model):
    """DeBERTa's pretraining settings, which both of the family's objectives use: the
    base shape (`model`), 1M steps of 2K rows of 512 tokens, Adam (eps 1e-6) at 2e-4
    after 10K warmup steps, linear decay, gradients clipped at 1, cased text, 80
    predictions."""
    return encoder.defaults(
        objective, model, total_steps=1_000_000, batch=2048, seq_len=512,
        learning_rate=2e-4, warmup_steps=10_000, schedule="warmup_linear", eps=1e-6,
        grad_clip=1.0, lower_case=False, mask_prob=0.15,
        max_predictions=80)  # 15% of 510 is at most 77: never binds


def mlm_defaults():
    """DeBERTa-base's MLM recipe (the paper's table 8, v2's vocabulary), with the EMD."""
    return paper_defaults("deberta_mlm", deberta.default_config(enhanced_mask_decoder=True))


def mlm_validate(cfg) -> None:
    """Checks for both of the family's objectives."""
    encoder.validate(cfg)
    if cfg.model.scan_layers or cfg.model.remat != "none":
        raise UserError("model.scan_layers and model.remat are not built for DeBERTa yet: "
                        "leave them False and none")


def rtd_defaults():
    """DeBERTa-v3-base: the v3 checkpoints' shape (12 x 768, 128,100 SentencePiece ids,
    256 position buckets up to 512), a generator of half the depth, loss MLM + 50 x RTD,
    trained, as the v3 paper says, with DeBERTa's settings: 1M steps of 2K rows of 512
    tokens, Adam (eps 1e-6) at 2e-4 after 10K warmup steps, linear decay, weight decay
    0.01, gradients clipped at 1; see configs/deberta_v3_base.py."""
    c = paper_defaults("deberta_rtd", deberta.default_config(
        generator_layers=0.5))  # of num_layers; the generator keeps the width
    c.gen_weight = 1.0
    c.disc_weight = 50.0
    return c


def rtd_validate(cfg) -> None:
    mlm_validate(cfg)
    config_lib.check_fraction(cfg, "model.generator_layers", 0.0, 1.0, closed_high=True)
    for name in ("gen_weight", "disc_weight"):
        if cfg[name] < 0:
            raise UserError(f"{name}={cfg[name]} must be >= 0")


registry.register(registry.Family(
    name="deberta", base="electra", outputs=deberta.outputs, sentence_pooling="cls",
    default_config=deberta.default_config, finetune_model=deberta.finetune_model,
    max_positions="max_position_embeddings",
    objectives=(
        objectives.Entry(name="deberta_mlm", build=deberta_mlm.DebertaMlm,
                         defaults=mlm_defaults, validate=mlm_validate,
                         as_pretrained=encoder.pretrained_mlm),
        objectives.Entry(
            name="deberta_rtd", build=deberta_rtd.DebertaRtd, defaults=rtd_defaults,
            validate=rtd_validate,
            as_pretrained=lambda model_cfg, params: (*rtd_model.as_pretrained(model_cfg, params),
                                                     "pretrain"),
            from_pretrained=rtd_model.from_pretrained)),
    hf=(hf.ADAPTER,)))
