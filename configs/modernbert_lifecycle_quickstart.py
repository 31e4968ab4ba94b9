"""The modern encoder's lifecycle at CPU size: ModernBERT's three phases in one run.

    python -m pretrainx.main --config=configs/modernbert_lifecycle_quickstart.py \
        --workdir=/tmp/lifecycle

The quickstart's ModernBERT (3 layers x 128, a 32-token window, the 4k vocabulary):
`pretrain`, rows of 128 tokens with the global RoPE base 10,000, 30% masking, the rate
held after its warmup, on four novels; `extension`, rows of 512 with the global base
160,000 at a lower constant rate (the same tokens a step); `decay`, a 1 - sqrt decay on
another mix (Tom Sawyer and WikiText-2's articles, half each) at 15% masking. Each
phase ends with an evaluation on the unseen Alice in rows of its length, at 15%
masking. `--describe` tables the phases. Expected and measured (docs/recipes.md#the-
encoder-lifecycle-phases-in-one-run): eval MLM accuracy at 512 tokens after
`extension` above that of `pretrain`'s model at 512, and the decay lowering the eval
loss again.
"""

import os

import ml_collections

import pretrainx
from pretrainx.objectives import default_config

ASSETS = os.path.join(os.path.dirname(pretrainx.__file__), "assets")
# Text beside this repository: the Gutenberg novels and WikiText-2 (../shared/data)
SHARED = os.path.normpath(os.path.join(
    os.path.dirname(os.path.realpath(__file__)), "..", "..", "shared", "data", "corpus"))


def _books(*names):
    return ",".join(os.path.join(SHARED, "gutenberg", n) for n in names)


def get_config():
    c = default_config("modernbert")
    c.total_steps = 1800
    c.global_batch_size = 32
    c.seq_len = 128
    c.log_every = 100
    c.eval_every = 100_000  # each phase's end, and the run's
    c.eval_steps = 8
    c.checkpoint_every = 300
    c.keep_checkpoints = 10
    c.model.update(num_layers=3, hidden_size=128, num_heads=2, mlp_dim=256, vocab_size=4096,
                   local_attention=32, max_position_embeddings=512, dtype="float32")
    c.optimizer.learning_rate = 2e-3
    c.optimizer.weight_decay = 1e-5 / 2e-3
    c.optimizer.warmup_steps = 100
    c.optimizer.accumulate_to, c.optimizer.batch_ramp = 1, 0.0
    c.optimizer.decay_steps = 300
    c.data.train_files = _books("pg1342_pride_and_prejudice.txt",
                                "pg1661_adventures_of_sherlock_holmes.txt",
                                "pg2701_moby_dick.txt", "pg84_frankenstein.txt")
    c.data.eval_files = _books("pg11_alice_in_wonderland.txt")
    c.data.tokenizer = os.path.join(ASSETS, "spm_4k.model")
    c.data.lower_case = True  # the bundled vocabulary is lower-cased
    c.data.max_predictions_per_seq = 40  # 30% of 126 is 38
    c.data.eval_mask_prob = 0.15

    c.phase_order = "pretrain,extension,decay"
    c.phases.pretrain = ml_collections.ConfigDict({
        "steps": 1200, "model": {"global_rope_theta": 10_000.0},
        "optimizer": {"schedule": "constant"}})
    c.phases.extension = ml_collections.ConfigDict({
        "steps": 300, "seq_len": 512, "global_batch_size": 8,
        "model": {"global_rope_theta": 160_000.0},
        "data": {"max_predictions_per_seq": 160},  # 30% of 510 is 153
        "optimizer": {"learning_rate": 1e-3, "warmup_steps": 0}})
    wiki = os.path.join(SHARED, "wikitext-2-raw", "wiki.valid.raw")
    c.phases.decay = ml_collections.ConfigDict({  # the rest: 300 steps
        "data": {"train_files": f"{_books('pg74_tom_sawyer.txt')};{wiki}",
                 "train_weights": "0.5,0.5", "mask_prob": 0.15},
        "optimizer": {"schedule": "warmup_stable_decay", "decay_steps": 300}})
    return c
