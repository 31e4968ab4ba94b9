"""SpanBERT's entry: BERT's fine-tuning modules, span masking with the span boundary
objective at the paper's run, and a BERT directory for HF."""

from pretrainx import config as config_lib
from pretrainx import objectives, registry
from pretrainx.models import transformer_encoder as enc
from pretrainx.families.spanbert import hf, span_mlm
from pretrainx.families.spanbert import model as spanbert
from pretrainx.objectives import encoder


def defaults():
    """SpanBERT-base (Joshi et al. 2020): span masking + span boundary objective, single
    512-token segments, cased WordPiece, 2.4M steps of 256 rows; see configs/spanbert.py."""
    c = encoder.defaults(
        "spanbert", spanbert.default_config(), total_steps=2_400_000, batch=256, seq_len=512,
        learning_rate=1e-4, warmup_steps=10_000, schedule="warmup_linear", lower_case=False,
        mask_prob=0.15, max_predictions=80)
    c.data.geometric_p = 0.2  # spans are whole words: no whole_word_masking key
    c.data.max_span_words = 10
    return c


def validate(cfg) -> None:
    encoder.validate(cfg)
    config_lib.check_positive(cfg, "data.max_span_words", "model.sbo_max_span_tokens")
    config_lib.check_fraction(cfg, "data.geometric_p", 0.0, 1.0, closed_high=True)


registry.register(registry.Family(
    name="spanbert", base="bert", outputs=enc.outputs, sentence_pooling="cls",
    default_config=spanbert.default_config, finetune_model=enc.finetune_model,
    peft=True, max_positions="max_position_embeddings", fill_mask=enc.fill_mask_model,
    objectives=(objectives.Entry(name="spanbert", build=span_mlm.SpanMlm, defaults=defaults,
                                 validate=validate, as_pretrained=encoder.pretrained_mlm),),
    hf=(hf.ADAPTER,)))
