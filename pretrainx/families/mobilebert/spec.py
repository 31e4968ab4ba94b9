"""MobileBERT's entry (Sun et al. 2020): its model and its teacher IB-BERT's, MLM + NSP
with the released distillation run's optimizer, the fine-tuning heads and HF's
MobileBertForPreTraining layout."""

import ml_collections

from pretrainx import config as config_lib
from pretrainx import objectives, registry
from pretrainx.errors import UserError
from pretrainx.families.mobilebert import hf, mobilebert_distill, mobilebert_mlm_nsp
from pretrainx.families.mobilebert import model as mobilebert
from pretrainx.objectives import encoder


def defaults(objective: str = "mobilebert"):
    """MobileBERT pretrained as google-research/mobilebert's run_pretraining.py flags
    give it: LAMB at 1.5e-3 with 10K warmup steps and linear decay, 500K steps of
    2,048 rows of 512 tokens, 20 predictions a row, BERT's pairs and masks."""
    c = encoder.defaults(objective, mobilebert.default_config(), total_steps=500_000,
                         batch=2048, seq_len=512, learning_rate=1.5e-3, name="lamb",
                         warmup_steps=10_000, schedule="bert_linear", lower_case=True,
                         mask_prob=0.15, max_predictions=20)
    c.data.whole_word_masking = False
    return encoder.packing_defaults(encoder.pairing_defaults(c))


def validate(cfg) -> None:
    encoder.validate(cfg)
    m = cfg.model
    config_lib.check_positive(cfg, "model.intra_size", "model.num_ffn",
                              "model.embedding_size", "data.dupe_factor")
    if m.intra_size % m.num_heads:
        raise UserError(f"model.intra_size={m.intra_size} is not divisible by "
                        f"model.num_heads={m.num_heads} (attention works at the intra width)")
    if m.embedding_size > m.hidden_size:
        raise UserError(f"model.embedding_size={m.embedding_size} exceeds model.hidden_size="
                        f"{m.hidden_size} (the MLM decoder extends the E-wide table to it)")
    config_lib.choice(m.normalization, "model.normalization", ("no_norm", "layer_norm"))
    encoder.validate_packing(cfg)


def distill_defaults():
    """MobileBERT distilled from IB-BERT as the released TF Model Garden config: 10K
    steps of layer-wise transfer a layer at a constant 1.5e-3 (24 layers: 240K steps),
    then 500K steps of pretraining distillation (MLM against half the label, half the
    teacher; NSP) with MobileBERT's own optimizer; the layers below frozen as the paper
    (the released code's if_freeze_previous_layers defaults to False)."""
    c = defaults("mobilebert_distill")
    d = c.distill = ml_collections.ConfigDict()
    d.teacher = ""  # IB-BERT (or a BERT of the student's width): a workdir or HF directory
    d.layer_steps = 10_000  # steps of each layer's transfer; 0: pretraining distillation only
    d.stage = -1  # -1: every stage in turn; k = 1..L: layer k's transfer; 0: distillation
    d.transfer_layers = ""  # the teacher layer (1-based) of each student layer; "": same
    d.hidden_factor = 100.0  # the feature map's normalized squared error
    d.beta_factor = 5000.0  # the squared gap of the features' means
    d.gamma_factor = 5.0  # the absolute gap of their variances
    d.attention_factor = 1.0  # attention transfer's cross-entropy
    d.freeze_lower_layers = True
    d.copy_from_teacher = True  # the embeddings and MLM head, before the first stage
    d.ground_truth_ratio = 0.5  # the MLM target's share of the one-hot label
    return c


def validate_distill(cfg) -> None:
    validate(cfg)
    d = cfg.distill
    if not -1 <= d.stage <= cfg.model.num_layers:
        raise UserError(f"distill.stage={d.stage}: -1 (every stage), 1..{cfg.model.num_layers} "
                        "(a layer's transfer) or 0 (pretraining distillation)")
    if d.layer_steps < 0:
        raise UserError(f"distill.layer_steps={d.layer_steps} must be >= 0")
    if not 0 <= d.ground_truth_ratio <= 1:
        raise UserError(f"distill.ground_truth_ratio={d.ground_truth_ratio} must be in [0, 1]")
    for key in ("hidden_factor", "beta_factor", "gamma_factor", "attention_factor"):
        if d[key] < 0:
            raise UserError(f"distill.{key}={d[key]} must be >= 0")


def distill_stages(cfg) -> list:
    """[(folder, config)] with distill.stage=-1: each layer's transfer (its own folder and
    a fresh optimizer at a constant rate, as the released code builds one a stage),
    then the pretraining distillation in WORKDIR itself; [] for one stage alone."""
    if cfg.distill.stage != -1:
        return []
    out = []
    for k in range(1, cfg.model.num_layers + 1) if cfg.distill.layer_steps else ():
        c = cfg.copy_and_resolve_references()
        with c.unlocked():
            c.distill.stage, c.total_steps = k, cfg.distill.layer_steps
            c.optimizer.schedule, c.optimizer.warmup_steps = "constant", 0
            c.eval_every = min(c.eval_every, c.total_steps)
            c.checkpoint_every = min(c.checkpoint_every, c.total_steps)
        out.append((f"transfer_{k}", c))
    c = cfg.copy_and_resolve_references()
    with c.unlocked():
        c.distill.stage = 0
    return out + [("", c)]


def _fill_mask(cfg, head: str):
    del head  # MobileBERT's checkpoints carry both heads
    return mobilebert.MobileBertForPreTraining(cfg)


registry.register(registry.Family(
    name="mobilebert", base="bert", outputs=mobilebert.outputs, sentence_pooling="cls",
    default_config=mobilebert.default_config, finetune_model=mobilebert.finetune_model,
    max_positions="max_position_embeddings", fill_mask=_fill_mask,
    objectives=(objectives.Entry(name="mobilebert", build=mobilebert_mlm_nsp.MobileBertMlmNsp,
                                 defaults=defaults, validate=validate,
                                 as_pretrained=encoder.pretrained_encoder),
                objectives.Entry(
                    name="mobilebert_distill", build=mobilebert_distill.MobileBertDistill,
                    defaults=distill_defaults, validate=validate_distill,
                    as_pretrained=lambda model_cfg, params: (model_cfg, params["student"],
                                                             "pretrain"),
                    # a stage continues its student; the teacher stays the one adopted
                    from_pretrained=lambda params, fresh: {"student": params,
                                                           "teacher": fresh["teacher"]},
                    imports=lambda cfg: {mobilebert_distill.TEACHER: cfg.distill.teacher},
                    stages=distill_stages)),
    hf=(hf.ADAPTER,)))
