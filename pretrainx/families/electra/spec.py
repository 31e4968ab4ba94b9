"""ELECTRA's entry: BERT's fine-tuning modules under the discriminator, the generator +
replaced token detection objective at ELECTRA-Small's run, HF's two directories."""

from pretrainx import config as config_lib
from pretrainx import objectives, registry
from pretrainx.errors import UserError
from pretrainx.models import transformer_encoder as enc
from pretrainx.families.electra import electra_rtd, hf
from pretrainx.families.electra import model as electra
from pretrainx.objectives import encoder


def defaults():
    """ELECTRA-Small (Clark et al. 2020; google-research/electra's defaults): a generator
    1/4 as wide trained by MLM and the discriminator by replaced token detection, loss
    MLM + 50 x RTD, one embedding block (E = 128) for both; see configs/electra.py."""
    c = encoder.defaults(
        "electra", electra.default_config(), total_steps=1_000_000, batch=128, seq_len=128,
        learning_rate=5e-4, warmup_steps=10_000, schedule="bert_linear",
        bias_correction=False,  # ELECTRA keeps BERT's AdamWeightDecayOptimizer
        lower_case=True, mask_prob=0.15,
        max_predictions=19)  # int((0.15 + 0.005) * 128), ELECTRA's rule
    c.gen_weight = 1.0  # the generator's MLM loss
    c.disc_weight = 50.0  # the discriminator's replaced token detection loss
    return c


def validate(cfg) -> None:
    encoder.validate(cfg)
    for name in ("model.generator_size", "model.generator_layers"):
        config_lib.check_fraction(cfg, name, 0.0, 1.0, closed_high=True)
    for name in ("gen_weight", "disc_weight"):
        if cfg[name] < 0:
            raise UserError(f"{name}={cfg[name]} must be >= 0")


registry.register(registry.Family(
    name="electra", base="bert", outputs=electra.outputs, default_config=electra.default_config,
    finetune_model=enc.finetune_model,
    peft=True, max_positions="max_position_embeddings",
    objectives=(objectives.Entry(name="electra", build=electra_rtd.ElectraRtd,
                                 defaults=defaults, validate=validate,
                                 as_pretrained=electra_rtd.as_pretrained,
                                 from_pretrained=electra.from_pretrained),),
    hf=(hf.ADAPTER,)))
