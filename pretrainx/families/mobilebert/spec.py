"""MobileBERT's entry (Sun et al. 2020): its model and its teacher IB-BERT's, MLM + NSP
with the released distillation run's optimizer, the fine-tuning heads and HF's
MobileBertForPreTraining layout."""

from pretrainx import config as config_lib
from pretrainx import objectives, registry
from pretrainx.errors import UserError
from pretrainx.families.mobilebert import hf, mobilebert_mlm_nsp
from pretrainx.families.mobilebert import model as mobilebert
from pretrainx.objectives import encoder


def defaults():
    """MobileBERT pretrained as google-research/mobilebert's run_pretraining.py flags
    give it: LAMB at 1.5e-3 with 10K warmup steps and linear decay, 500K steps of
    2,048 rows of 512 tokens, 20 predictions a row, BERT's pairs and masks."""
    c = encoder.defaults("mobilebert", mobilebert.default_config(), total_steps=500_000,
                         batch=2048, seq_len=512, learning_rate=1.5e-3, name="lamb",
                         warmup_steps=10_000, max_predictions=20)
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


def _fill_mask(cfg, head: str):
    del head  # MobileBERT's checkpoints carry both heads
    return mobilebert.MobileBertForPreTraining(cfg)


registry.register(registry.Family(
    name="mobilebert", outputs=mobilebert.outputs, sentence_pooling="cls",
    default_config=mobilebert.default_config, finetune_model=mobilebert.finetune_model,
    max_positions="max_position_embeddings", fill_mask=_fill_mask,
    objectives=(objectives.Entry(name="mobilebert", build=mobilebert_mlm_nsp.MobileBertMlmNsp,
                                 defaults=defaults, validate=validate,
                                 as_pretrained=encoder.pretrained_encoder),),
    hf=(hf.ADAPTER,)))
