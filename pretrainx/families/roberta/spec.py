"""RoBERTa's entry: BERT's modules over RoBERTa's model keys (fairseq's ids for a
byte-level vocabulary), MLM on FULL-SENTENCES rows at the paper's run, HF's layout."""

from pretrainx import objectives, registry
from pretrainx.models import transformer_encoder as enc
from pretrainx.families.roberta import hf, roberta_mlm
from pretrainx.families.roberta import model as roberta
from pretrainx.objectives import encoder


def defaults():
    """RoBERTa-base (Liu et al. 2019): MLM only with dynamic masks, FULL-SENTENCES rows
    of 512 tokens that cross documents, byte-level BPE, 500K steps of 8K rows, Adam
    (b2 0.98) at 6e-4 with 24K warmup steps, no clipping; see configs/roberta.py."""
    c = encoder.defaults(
        "roberta", roberta.default_config(), total_steps=500_000, batch=8192, seq_len=512,
        learning_rate=6e-4, warmup_steps=24_000, schedule="warmup_linear", b2=0.98, eps=1e-6,
        grad_clip=0.0,  # fairseq's recipe: --clip-norm 0.0
        lower_case=False, mask_prob=0.15,
        max_predictions=80)  # 15% of 510 rounds to at most 77: never binds
    # pack_examples: rows end with their document (DOC-SENTENCES' rows) and are packed
    # several a row, each isolated; off: the paper's FULL-SENTENCES rows
    return encoder.packing_defaults(c)


def validate(cfg) -> None:
    encoder.validate(cfg)
    encoder.validate_packing(cfg)


registry.register(registry.Family(
    name="roberta", base="bert", outputs=enc.outputs, sentence_pooling="cls",
    default_config=roberta.default_config, finetune_model=enc.finetune_model,
    peft=True, max_positions="max_position_embeddings", fill_mask=enc.fill_mask_model,
    tokenizer_layout="fairseq",
    objectives=(objectives.Entry(name="roberta", build=roberta_mlm.RobertaMlm,
                                 defaults=defaults, validate=validate,
                                 as_pretrained=encoder.pretrained_mlm),),
    hf=(hf.ADAPTER, hf.XLMR_ADAPTER)))
