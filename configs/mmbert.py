"""mmBERT (Marone, Weller et al. 2025): ModernBERT's network over 1,833 languages, learned
in three phases that anneal the masking rate, the languages' temperature and the set of
languages together.

    python -m pretrainx.main --config=configs/mmbert.py:base --workdir=gs://BUCKET/mmbert \
        --config.data.tokenizer=/data/gemma2/tokenizer.model \
        --config.data.train_files='/data/p1/en/*.jsonl;/data/p1/de/*.jsonl;...' \
        --config.phases.extension.data.train_files='...the 110 languages...' \
        --config.phases.decay.data.train_files='...all 1,833...'

The network is ModernBERT's (families/modernbert/model.py) with a 256,000-piece
vocabulary, the size of Gemma 2's SentencePiece model, which the released models use
(its <bos> <eos> <mask> serve as [CLS] [SEP] [MASK]; give the file with
data.tokenizer); 22 layers, a global layer every third, a 128-token window.
`data.train_files` holds one ';'-separated source a language (names in
data.train_source_names), drawn with probability ~ tokens^mixing_alpha. The phases,
from the authors' training configs (github.com/JHU-CLSP/mmBERT, configs/*.yaml) and the
paper's section 2:

| phase | tokens | length | masking | temperature | languages | rate |
|---|---|---|---|---|---|---|
| pretrain | 2.3T | 1,024 | 30% | 0.7 | 60 | 8e-4 after the warmup |
| extension | 600B | 8,192 | 15% | 0.5 | 110 | 8e-4 |
| decay | 100B | 8,192 | 5% | 0.3 | 1,833 | 1 - sqrt to 0.02 x 8e-4 |

RoPE base 10,000 in every layer, then 160,000 in every layer from the extension on;
StableAdamW (b2 0.95, eps 1e-8, decoupled weight decay 8e-5); the batch warms up from
384 to 4,608 rows of 1,024 over 100B tokens (small) or 60B (base), the rate over 4B or
3B. Each phase's languages are its own `train_files` (a placeholder keeps the phase
before's until set). The released model merges decay variants (mmBERT's Decay-Eng,
-Cont and -All mixes): train the decay once per mix from one extension checkpoint and
TIES-merge them (docs/recipes.md#mmbert shows the commands). Parameter counts
(tests/families/test_mmbert.py, against transformers' ModernBertForMaskedLM at these shapes):
small 140,897,536, base 307,786,240, of which 42.6M and 111.2M outside
the embedding (released: 140M and 307M; 42M and 110M). Drift (docs/recipes.md#mmbert):
packed rows and the long phases' updates keep phase 1's tokens (576 rows of 8,192; theirs
4,608 rows); base masks 30% in phase 1 as the paper says (its released yaml reads 25%).
"""

import ml_collections

from pretrainx.families.modernbert.modernbert_mlm import token_schedule
from pretrainx.objectives import default_config

SIZES = {  # hidden, heads, warmup tokens, batch warmup tokens
    "small": (384, 6, 4e9, 100e9),
    "base": (768, 12, 3e9, 60e9),
}
LAYERS, GEGLU, VOCAB, LONG = 22, 1152, 256_000, 8192
PEAK, WEIGHT_DECAY = 8e-4, 8e-5
FIRST, FINAL = 384, 4608  # rows: 48 a device on 8 devices, then the full batch
# (name, tokens, masking rate, temperature, masks a row can hold: the rate of the
# row's length, rounded up to a multiple of 8)
PHASES = (("pretrain", 2.3e12, 0.30, 0.7, 320),
          ("extension", 600e9, 0.15, 0.5, 1232),
          ("decay", 100e9, 0.05, 0.3, 416))


def get_config(size: str = "base"):
    if size not in SIZES:
        raise ValueError(f"configs/mmbert.py:{size}: expected one of {', '.join(SIZES)}")
    hidden, heads, warmup, ramp = SIZES[size]
    c = default_config("modernbert")
    c.model.update(num_layers=LAYERS, hidden_size=hidden, num_heads=heads, mlp_dim=GEGLU,
                   vocab_size=VOCAB, max_position_embeddings=LONG,
                   global_rope_theta=160_000.0, local_rope_theta=160_000.0,
                   dtype="bfloat16")  # compute; parameters and optimizer state stay float32
    total = sum(tokens for _, tokens, *_ in PHASES)
    token_schedule(c, micro_batch=FIRST, accumulate_to=FINAL // FIRST, learning_rate=PEAK,
                   warmup_tokens=warmup, ramp_tokens=ramp, total_tokens=total,
                   decay_tokens=PHASES[-1][1])
    c.optimizer.update(b2=0.95, eps=1e-8,
                       weight_decay=WEIGHT_DECAY / PEAK)  # decoupled: optax multiplies by the rate
    c.data.mask_prob, c.data.mixing_alpha = PHASES[0][2], PHASES[0][3]
    c.data.max_predictions_per_seq = PHASES[0][4]
    step_tokens = c.global_batch_size * c.seq_len
    long_rows = step_tokens // LONG  # a micro-batch of the same tokens: 48 rows
    steps = [round(PHASES[0][1] / step_tokens)] + [
        round(tokens / (long_rows * LONG)) for _, tokens, *_ in PHASES[1:]]
    c.total_steps = sum(steps)
    c.optimizer.batch_ramp = ramp / step_tokens / c.total_steps  # the ramp's steps kept
    c.optimizer.decay_steps = steps[-1]
    languages = {"train_files": ml_collections.config_dict.placeholder(str),
                 "train_source_names": ml_collections.config_dict.placeholder(str)}
    c.phases.pretrain = ml_collections.ConfigDict({
        "steps": steps[0],
        "model": {"global_rope_theta": 10_000.0, "local_rope_theta": 10_000.0},
        "optimizer": {"schedule": "constant"}})  # held after the warmup
    for (name, _, rate, alpha, predictions), n in zip(PHASES[1:], steps[1:]):
        c.phases[name] = ml_collections.ConfigDict({
            "steps": n, "seq_len": LONG, "global_batch_size": long_rows,
            "data": dict(languages, mask_prob=rate, mixing_alpha=alpha,
                         max_predictions_per_seq=predictions)})
    # a phase's keys carry into the next: the extension sets 160,000 back
    c.phases.extension.model = ml_collections.ConfigDict(
        {"global_rope_theta": 160_000.0, "local_rope_theta": 160_000.0})
    c.phases.decay.optimizer = ml_collections.ConfigDict({
        "schedule": "warmup_stable_decay", "warmup_steps": 0, "decay_steps": steps[-1],
        "final_lr_fraction": 0.02})
    c.phase_order = ",".join(name for name, *_ in PHASES)
    c.mesh.data = 1
    c.mesh.fsdp = -1  # FSDP over every device, as the ModernBERT recipes
    return c
