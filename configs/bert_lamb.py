"""BERT with LAMB at large batch (You et al. 2020, "Large Batch Optimization for Deep
Learning: Training BERT in 76 Minutes"): the mixed-batch run of its table 1, 8,599
steps in place of BERT's million, for slices the 1,024-sequence batch leaves idle.

    python -m pretrainx.main --config=configs/bert_lamb.py:large --workdir=gs://BUCKET/lamb \
        --config.data.train_files='/data/wiki_books/*.txt' \
        --config.data.tokenizer=/data/bert-base-uncased/vocab.txt
    python -m pretrainx.plan --config=configs/bert_lamb.py:base --topology=v6e:4x4 --phase=1

Everything else is configs/bert.py's (the size, MLM + NSP, 15% masking, dropout 0.1).
What the paper changes, and what this file sets:
* phase "short": 7,037 steps of 65,536 sequences of 128 (20 predictions each), then
  phase "long": 1,562 steps of 32,768 of 512 (80), 8,599 in all, as the paper's 64k/32k
  row; each phase warms up again from 0 and decays linearly to 0 over its own steps
  (the paper's "re-warm-up" of the second stage). The decay starts at the warmup's end
  (`warmup_linear`, as NVIDIA's reproduction): BERT's own schedule counts its decay
  from the first step, which after a warmup of 40% would drop from the peak to 60% of it;
* LAMB (optax's chain with BERT's exclusions: LayerNorm and biases get neither weight
  decay nor the trust ratio), Adam's bias correction on (the paper's algorithm 2),
  b1 0.9, b2 0.999, eps 1e-6, weight decay 0.01; gradients clipped at norm 1.0 as the
  BERT code the paper trained with;
* learning rates by the paper's square-root rule for untuned LAMB (5e-3 at batch 32k,
  times sqrt(2) at 64k: 7.07e-3 and 5e-3) with its linear-epoch warmup (1/5 of the
  steps at 32k, 2/5 at 64k: 2,815 and 312 steps). Drift named: the paper gives the
  rule and its 32k point, not the tuned 64k/32k rates of its 76-minute run; NVIDIA's
  reproduction (DeepLearningExamples) tuned them to 6e-3 / 4e-3 with 28.4% / 12.8%
  warmup. Both are one override away (--config.optimizer.learning_rate=6e-3, ...).

On a 16-chip slice each chip takes 4,096 sequences of 128 or 2,048 of 512 a step: the
step accumulates micro_batches=16 micro-batches (256 of 128, 128 of 512 per chip), data
parallel with ZeRO-1 (mesh.shard_optimizer) rather than configs/bert.py's FSDP. The
argument picks the size, as configs/bert.py's: base (110M) or large (340M), the paper's.
"""

import ml_collections

from pretrainx.config import sibling_config

SHORT_STEPS, LONG_STEPS = 7_037, 1_562
SHORT = {"global_batch_size": 65_536, "seq_len": 128, "max_predictions_per_seq": 20,
         "learning_rate": 5e-3 * 2 ** 0.5, "warmup_steps": 2_815}
LONG = {"global_batch_size": 32_768, "seq_len": 512, "max_predictions_per_seq": 80,
        "learning_rate": 5e-3, "warmup_steps": 312}


def get_config(size: str = "large"):
    c = sibling_config(__file__, "bert.py", size)
    c.total_steps = SHORT_STEPS + LONG_STEPS
    c.phase2.fraction = 0.0  # the two lengths are named phases: each has its own schedule
    c.global_batch_size, c.seq_len = SHORT["global_batch_size"], SHORT["seq_len"]
    c.data.max_predictions_per_seq = SHORT["max_predictions_per_seq"]
    c.optimizer.update(name="lamb", bias_correction=True, learning_rate=SHORT["learning_rate"],
                       warmup_steps=SHORT["warmup_steps"], schedule="warmup_linear",
                       b1=0.9, b2=0.999, eps=1e-6, weight_decay=0.01, grad_clip=1.0)
    c.micro_batches = 16
    # data parallel with ZeRO-1: the parameters stay whole through the 16 micro-batches
    # (FSDP would gather them again in each), the LAMB state and update split 16 ways
    c.mesh.data, c.mesh.fsdp, c.mesh.shard_optimizer = -1, 1, True
    c.phases = ml_collections.ConfigDict({
        "short": {"steps": SHORT_STEPS},
        "long": {"seq_len": LONG["seq_len"], "global_batch_size": LONG["global_batch_size"],
                 "data": {"max_predictions_per_seq": LONG["max_predictions_per_seq"]},
                 "optimizer": {"learning_rate": LONG["learning_rate"],
                               "warmup_steps": LONG["warmup_steps"]}}})
    c.phase_order = "short,long"
    return c
