"""The crammed BERT's entry (Geiping & Goldstein 2023): its model, MLM under a wall-clock
budget with the one-cycle schedule and batch ramp, and its own fine-tuning head."""

from pretrainx import config as config_lib
from pretrainx import objectives, registry
from pretrainx.errors import UserError
from pretrainx.families.crammed import crammed_mlm
from pretrainx.families.crammed import model as crammed
from pretrainx.objectives import encoder


def defaults():
    """bert-o4 with crammed-bert: a day on one GPU (budget 24 hours)."""
    model = crammed.default_config(
        dropout_rate=0.0, attention_dropout_rate=0.0)  # pretrain_in_train_mode False
    c = encoder.defaults(
        "crammed", model,
        total_steps=900_000,  # micro-batch steps: the schedule's resolution and upper bound
        batch=128, seq_len=128,  # the micro-batch; updates take accumulate_to
        learning_rate=1e-3, b2=0.98, eps=1e-12, weight_decay=0.01, grad_clip=0.5,
        warmup_steps=0, schedule="one_cycle", cycle_start=0.25, cycle_falloff=0.25,
        budget_hours=24.0,
        accumulate_to=64,  # 64 x 128 = their batch of 8,192
        batch_ramp=0.6,  # the full batch at 60% of the budget
        lower_case=True, mask_prob=0.25,
        max_predictions=32)  # 25% of 126 rounds to at most 32
    c.data.eval_mask_prob = 0.0  # 0: evaluate at mask_prob
    return c


def validate(cfg) -> None:
    encoder.validate(cfg)
    o = cfg.optimizer
    if not 0 <= o.cycle_start <= 1 or not 0 < o.cycle_falloff < 1:
        raise UserError(f"optimizer.cycle_start={o.cycle_start} must be in [0, 1] and "
                        f"optimizer.cycle_falloff={o.cycle_falloff} in (0, 1)")
    config_lib.check_positive(cfg, "data.max_predictions_per_seq")
    if cfg.data.eval_mask_prob:  # 0 (the recipe's default): evaluate at data.mask_prob
        config_lib.check_fraction(cfg, "data.eval_mask_prob", 0.0, 1.0)


registry.register(registry.Family(
    name="crammed", default_config=crammed.default_config, finetune_model=crammed.finetune_model,
    max_positions="max_position_embeddings",
    objectives=(objectives.Entry(name="crammed", build=crammed_mlm.CrammedMlm,
                                 defaults=defaults, validate=validate,
                                 as_pretrained=encoder.pretrained_mlm),)))
