"""ALBERT's entry: BERT's fine-tuning modules over ALBERT's model keys, the MLM + SOP
objective with the paper's run, and HF's AlbertForPreTraining layout."""

from pretrainx import config as config_lib
from pretrainx import objectives, registry
from pretrainx.families.albert import albert_mlm_sop, hf
from pretrainx.families.albert import model as albert
from pretrainx.models import transformer_encoder as enc
from pretrainx.objectives import encoder


def defaults():
    """ALBERT-base v2 (Lan et al. 2020, google-research/albert): BERT's encoder with
    128-wide factorised embeddings and one layer's parameters shared by all 12,
    n-gram masking (n <= 3) and sentence-order prediction instead of NSP; 125K steps
    of 4,096 x 512 tokens (10% of pairs shorter), LAMB lr 0.00176, 3,125 warmup
    steps, linear decay, dropout 0 (v2; v1 had 0.1), 30,000 SentencePiece pieces;
    see configs/albert.py."""
    c = encoder.defaults(
        "albert", albert.default_config(), total_steps=125_000, batch=4096, seq_len=512,
        learning_rate=0.00176, name="lamb", warmup_steps=3125,
        schedule="bert_linear",  # albert's optimization.py: BERT's, to the letter
        # 15% of 509 tokens is at most 77; google-research/albert's flag default of 20
        # would cap the rate at 4% of a 512-token row.
        lower_case=True, mask_prob=0.15, max_predictions=80)
    # dupe_factor 40: create_pretraining_data's default (masks are dynamic here)
    c = encoder.pairing_defaults(c, dupe_factor=40)
    c.data.max_ngram = 3  # n-grams are whole words: no whole_word_masking key
    return encoder.packing_defaults(c)


def validate(cfg) -> None:
    encoder.validate(cfg)
    config_lib.check_positive(cfg, "data.dupe_factor", "data.max_ngram")
    encoder.validate_packing(cfg)


registry.register(registry.Family(
    name="albert", base="bert", outputs=enc.outputs, sentence_pooling="cls",
    default_config=albert.default_config, finetune_model=enc.finetune_model,
    peft=True, max_positions="max_position_embeddings", fill_mask=enc.fill_mask_model,
    objectives=(objectives.Entry(name="albert", build=albert_mlm_sop.AlbertMlmSop,
                                 defaults=defaults, validate=validate,
                                 as_pretrained=encoder.pretrained_encoder),),
    hf=(hf.ADAPTER,)))
