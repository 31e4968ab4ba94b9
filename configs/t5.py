"""T5 span-corruption pretraining at the published sizes of T5 1.0 and T5 1.1.

    python -m pretrainx.main --config=configs/t5.py:base --workdir=gs://BUCKET/t5_base \
        --config.data.train_files='/data/c4/*.txt' \
        --config.data.tokenizer=/data/t5/spiece.model

The argument is SIZE[,adafactor]. SIZE is small, base or large (T5 1.0, Raffel et
al. 2020: ReLU feed-forward, output tied to the embeddings, dropout 0.1) or
v1_1_small, v1_1_base, v1_1_large (T5 1.1: gated-GELU, untied output layer, no
dropout in pretraining). The recipe is the paper's: span corruption with noise
density 0.15 and mean span length 3, inputs 512 (568 raw tokens) and targets
114, packed, batch 128 (about 2^16 tokens), 2^19 steps, SentencePiece vocabulary
of 32,000 pieces + 100 sentinels (32,128 rows).

The optimizer is AdamW with linear warmup and decay unless ",adafactor" asks for
T5's own: Adafactor with learning rate 1/sqrt(max(step, 10^4)), no weight decay,
no clipping beyond Adafactor's update clipping.
"""

from pretrainx.objectives import default_config

SIZES = {  # encoder/decoder layers, d_model, heads, d_kv, d_ff
    "small": (6, 512, 8, 64, 2048),
    "base": (12, 768, 12, 64, 3072),
    "large": (24, 1024, 16, 64, 4096),
    "v1_1_small": (8, 512, 6, 64, 1024),
    "v1_1_base": (12, 768, 12, 64, 2048),
    "v1_1_large": (24, 1024, 16, 64, 2816),
}


def get_config(arg: str = "base"):
    size, _, optimizer = arg.partition(",")
    if size not in SIZES or optimizer not in ("", "adafactor"):
        raise ValueError(f"unknown T5 config {arg!r}; use SIZE[,adafactor] with SIZE one of "
                         f"{', '.join(SIZES)}")
    layers, d_model, heads, d_kv, d_ff = SIZES[size]
    v1_1 = size.startswith("v1_1")
    c = default_config("t5")

    # FSDP over every device, as the BERT recipes: parameters and optimizer state
    # sharded, the batch split the same way. Compiler cost-model estimates (python -m
    # pretrainx.plan.planner): T5-Base on v3:4x4 0.052 s/step against 0.063 data parallel;
    # T5-Large on v3:8x8 0.065 against 0.096 (and 2.3 GiB a device, not 10.1).
    c.mesh.data = 1
    c.mesh.fsdp = -1

    c.model.num_layers = layers
    c.model.num_decoder_layers = layers
    c.model.hidden_size = d_model
    c.model.num_heads = heads
    c.model.head_dim = d_kv
    c.model.mlp_dim = d_ff
    if v1_1:  # gated GELU, untied output layer, no dropout in pretraining
        c.model.feed_forward, c.model.tie_output = "gated-gelu", False
        c.model.dropout_rate = 0.0
    c.model.dtype = "bfloat16"  # compute; parameters and optimizer state stay float32

    if optimizer == "adafactor":
        c.optimizer.name = "adafactor"
        c.optimizer.schedule = "rsqrt"
        c.optimizer.learning_rate = 0.01  # x sqrt(10^4 / max(step, 10^4))
        c.optimizer.weight_decay = 0.0
        c.optimizer.grad_clip = 0.0
    # else the defaults: AdamW at 1e-3, 10k warmup steps, linear decay, clipping at 1.0

    return c
