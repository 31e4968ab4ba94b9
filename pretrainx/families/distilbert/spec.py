"""DistilBERT's entry (Sanh et al. 2019): a 6-layer student under BERT's fine-tuning
modules, distilled from a teacher it imports, HF's DistilBertForMaskedLM layout."""

import ml_collections

from pretrainx import config as config_lib
from pretrainx import objectives, registry
from pretrainx.errors import UserError
from pretrainx.models import transformer_encoder as enc
from pretrainx.families.distilbert import distil_mlm, hf
from pretrainx.families.distilbert import model as distilbert
from pretrainx.objectives import encoder


def defaults():
    """DistilBERT (Sanh et al. 2019; HF's research_projects/distillation command): a
    6-layer student of BERT-Base's width distilled from bert-base-uncased, started from
    one teacher layer in two, on FULL-SENTENCES rows with dynamic masking (15%,
    80/10/10), 4K rows of 512 tokens a batch, 3 passes over English Wikipedia and
    BookCorpus (about 4B tokens: 6,000 steps; the paper gives hours, not steps),
    Adam (eps 1e-6, no weight decay) at 5e-4 with 5% warmup and linear decay,
    gradients clipped at 5, loss 5.0 KL(T = 2) + 2.0 MLM + 1.0 cosine, the student's
    position table frozen (--freeze_pos_embs); see configs/distilbert_base.py."""
    c = encoder.defaults(
        "distil", distilbert.default_config(), total_steps=6_000, batch=4096, seq_len=512,
        learning_rate=5e-4, warmup_steps=300, schedule="warmup_linear", eps=1e-6,
        weight_decay=0.0, grad_clip=5.0, lower_case=True, mask_prob=0.15,
        max_predictions=80)  # 15% of 510 is at most 77: never binds
    d = c.distill = ml_collections.ConfigDict()
    d.teacher = ""  # a BERT/RoBERTa pretraining workdir or HF directory, with its MLM head
    d.temperature = 2.0
    d.alpha_ce = 5.0  # soft targets: T^2 KL(teacher || student)
    d.alpha_mlm = 2.0  # the student's own MLM loss
    d.alpha_cos = 1.0  # last hidden states' cosine distance
    d.soft_targets = "masked"  # masked | all (HF's script: all real tokens; memory, see above)
    d.init_from_teacher = True  # one teacher layer in two, embeddings and MLM head
    d.freeze_positions = True  # the student's position table stays the teacher's
    # TinyBERT (Jiao et al. 2020), off: STUDENT:TEACHER layer pairs (0: embeddings), e.g.
    # "0:0,1:2,2:4,3:6,4:8,5:10,6:12", and the weights of its two terms
    d.layer_map = ""
    d.alpha_att = 0.0  # attention probabilities' squared error
    d.alpha_hidden = 0.0  # hidden states' squared error
    d.project_hidden = False  # learned W_e / W_h where the teacher is wider
    return c


def validate(cfg) -> None:
    encoder.validate(cfg)
    d = cfg.distill
    config_lib.choice(d.soft_targets, "distill.soft_targets", ("masked", "all"))
    if not d.temperature > 0:
        raise UserError(f"distill.temperature={d.temperature} must be > 0")
    for key in ("alpha_ce", "alpha_mlm", "alpha_cos", "alpha_att", "alpha_hidden"):
        if d[key] < 0:
            raise UserError(f"distill.{key}={d[key]} must be >= 0")
    distil_mlm.parse_layer_map(d.layer_map)
    if d.alpha_att > 0 and cfg.model.attention_impl not in ("xla", "auto"):
        raise UserError(f"distill.alpha_att={d.alpha_att} reads the student's attention "
                        f"probabilities, which model.attention_impl="
                        f"{cfg.model.attention_impl} never forms: use xla, or alpha_att=0")
    if d.layer_map and cfg.model.scan_layers:
        raise UserError("distill.layer_map reads every layer's output: set "
                        "model.scan_layers=False")


registry.register(registry.Family(
    name="distilbert", base="bert", outputs=enc.outputs, sentence_pooling="cls",
    default_config=distilbert.default_config,
    finetune_model=enc.finetune_model, peft=True, max_positions="max_position_embeddings",
    fill_mask=enc.fill_mask_model,
    objectives=(objectives.Entry(
        name="distil", build=distil_mlm.DistilMlm, defaults=defaults, validate=validate,
        as_pretrained=lambda model_cfg, params: (model_cfg, params["student"], "mlm"),
        from_pretrained=lambda params, fresh: {"student": params},
        imports=lambda cfg: {distil_mlm.TEACHER: cfg.distill.teacher}),),
    hf=(hf.ADAPTER,)))
