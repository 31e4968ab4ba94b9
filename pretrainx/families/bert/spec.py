"""BERT's entry (Devlin et al. 2019): its model and fine-tuning heads, MLM + NSP with
google-research/bert's two-length run, HF's BertForPreTraining layout and
google-research's TensorFlow checkpoints."""

import ml_collections

from pretrainx import config as config_lib
from pretrainx import objectives, registry
from pretrainx.families.bert import hf, mlm_nsp, tf
from pretrainx.families.bert import model as bert
from pretrainx.models import transformer_encoder as enc
from pretrainx.objectives import encoder


def defaults():
    """BERT-Base pretraining as the paper and google-research/bert run it: 1M steps, 90%
    at length 128 (batch 1024, 20 predictions) then 10% at 512 (batch 256, 80)."""
    # AdamWeightDecayOptimizer has no bias correction
    c = encoder.pairing_defaults(encoder.defaults(
        "bert", bert.default_config(), total_steps=1_000_000, batch=1024, seq_len=128,
        learning_rate=1e-4, schedule="bert_linear", lower_case=True, mask_prob=0.15,
        max_predictions=20, bias_correction=False))
    c.data.whole_word_masking = False  # the later release's option: whole words masked
    c.phase2 = ml_collections.ConfigDict()
    c.phase2.fraction = 0.1  # last 10% of steps at length 512; 0 turns it off
    c.phase2.seq_len = 512
    c.phase2.global_batch_size = 256
    c.phase2.max_predictions_per_seq = 80
    return encoder.packing_defaults(c)


def validate(cfg) -> None:
    encoder.validate(cfg)
    config_lib.check_positive(cfg, "data.dupe_factor")
    encoder.validate_packing(cfg)


registry.register(registry.Family(
    name="bert", outputs=enc.outputs, sentence_pooling="cls",
    default_config=bert.default_config, finetune_model=enc.finetune_model,
    peft=True, max_positions="max_position_embeddings", fill_mask=enc.fill_mask_model,
    objectives=(objectives.Entry(name="bert", build=mlm_nsp.MlmNsp, defaults=defaults,
                                 validate=validate,
                                 as_pretrained=encoder.pretrained_encoder),),
    hf=(hf.ADAPTER,), formats=(tf.FORMAT,)))
