"""The config contract: every key a training config may have, and its checks.

Recipe files in `configs/` start from `default_config()` and set what their
recipe says; a key that is not here is a typo and is refused by `validate`, so
that a sweep over a misspelt field fails loudly instead of silently training the
default.
"""

import os

import ml_collections

from pretrainx.errors import UserError

# Logical axis name -> mesh axes. One table for the whole model zoo: changing the
# parallelism is an edit of this table (or of `mesh.*`), never of a model file.
DEFAULT_SHARDING_RULES = (
    ("batch", ("data", "fsdp")),
    ("length", None),
    ("embed", "fsdp"),
    ("heads", "tensor"),
    ("kv", None),
    ("mlp", "tensor"),
    ("vocab", "tensor"),
    ("position", None),
    ("type_vocab", None),
    ("classes", None),
    ("pred", None),
    ("relpos_buckets", None),
    ("layers", None),  # the stacked axis of scan_layers
    ("lora_rank", None),  # parameter-efficient tuning's small axes stay whole
    ("adapter", None),
    ("prefix", None),
)

OBJECTIVES = ("bert", "t5", "causal_lm", "roberta", "spanbert", "elmo", "albert", "electra")


def _shared_sections(objective: str, total_steps: int, batch: int, seq_len: int,
                     learning_rate: float, schedule: str) -> ml_collections.ConfigDict:
    """Keys every objective has: run length and logging, mesh, optimizer, data files."""
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.objective = objective
    # Continued pretraining: start from a model (HF directory, google-research BERT,
    # or another run's workdir) instead of random weights; the model keys must match it.
    c.init_from = ""
    c.total_steps = total_steps
    c.global_batch_size = batch
    c.seq_len = seq_len
    c.micro_batches = 1  # gradient accumulation: global batch split in this many
    c.log_every = 100
    c.eval_every = 10_000
    c.eval_steps = 20
    c.checkpoint_every = 10_000
    c.keep_checkpoints = 3
    # jax.profiler trace of this many steps into WORKDIR/profile (TensorBoard's
    # profile tab), from profile_start_step on: past compilation and warm-up.
    c.profile_steps = 0
    c.profile_start_step = 5
    # A step whose loss or gradient is not finite leaves the model as it was; this
    # many in a row stop the run (the last good checkpoint stays).
    c.max_skipped_steps = 10

    c.mesh = ml_collections.ConfigDict()
    c.mesh.data = -1  # -1: all devices not taken by the other axes
    c.mesh.fsdp = 1
    c.mesh.tensor = 1
    c.sharding_rules = DEFAULT_SHARDING_RULES

    c.optimizer = ml_collections.ConfigDict()
    c.optimizer.name = "adamw"  # adamw | adafactor | adagrad | lamb
    c.optimizer.learning_rate = learning_rate
    c.optimizer.warmup_steps = 10_000
    c.optimizer.schedule = schedule  # bert_linear | warmup_linear | constant | rsqrt | cosine
    c.optimizer.b1 = 0.9
    c.optimizer.b2 = 0.999
    c.optimizer.eps = 1e-6
    c.optimizer.weight_decay = 0.01
    c.optimizer.grad_clip = 1.0

    c.data = ml_collections.ConfigDict()
    c.data.train_files = ""
    c.data.eval_files = ""
    c.data.format = "auto"  # auto | sentences | text
    c.data.tokenizer = ""
    # train_files: comma-separated globs (text, .gz, .jsonl) or tfds:NAME[@SPLIT];
    # ';' separates sources, mixed by train_weights (equal when empty).
    c.data.train_weights = ""
    c.data.text_field = "text"  # the JSONL / TFDS field that holds the text
    c.data.skip_bad_lines = False  # True: skip and count bad JSONL lines, cut truncated .gz
    c.data.tfds_data_dir = ""  # where tfds: datasets are prepared (local or gs://)
    c.data.tfds_reader = "data_source"  # data_source (ArrayRecord, no TF) | tf (tfds.load)
    c.data.docs_per_shard = 10_000  # documents an objective pairs/joins within (one shard)
    c.data.prepared_dir = ""  # output of `python -m pretrainx.data prepare`: read ids only
    c.data.worker_processes = 0  # grain processes for the batch transforms (0: threads)
    return c


def default_config(objective: str = "bert") -> ml_collections.ConfigDict:
    """The keys of `objective`'s configs with their defaults.

    bert: BERT-Base pretraining as the paper and google-research/bert run it.
    t5: T5 1.0 Base span-corruption pretraining (see `t5_config`).
    causal_lm: GPT-2 small; roberta: RoBERTa-base; spanbert: SpanBERT-base;
    albert: ALBERT-base v2.
    """
    if objective == "t5":
        return t5_config()
    if objective == "causal_lm":
        return gpt2_config()
    if objective == "roberta":
        return roberta_config()
    if objective == "spanbert":
        return spanbert_config()
    if objective == "elmo":
        return elmo_config()
    if objective == "albert":
        return albert_config()
    if objective == "electra":
        return electra_config()
    if objective != "bert":
        raise UserError(f"config key 'objective' is {objective!r}; expected one of "
                        f"{', '.join(OBJECTIVES)}")
    c = _shared_sections("bert", total_steps=1_000_000, batch=1024, seq_len=128,
                         learning_rate=1e-4, schedule="bert_linear")
    c.model = ml_collections.ConfigDict()
    c.model.family = "bert"
    c.model.num_layers = 12
    c.model.hidden_size = 768
    c.model.num_heads = 12
    c.model.mlp_dim = 3072
    c.model.vocab_size = 30522
    c.model.max_position_embeddings = 512
    c.model.type_vocab_size = 2
    c.model.dropout_rate = 0.1
    c.model.attention_dropout_rate = 0.1
    c.model.layer_norm_eps = 1e-12
    c.model.initializer_range = 0.02
    c.model.hidden_act = "gelu_tanh"  # google-research/bert's gelu is the tanh form
    c.model.dtype = "float32"  # compute dtype; parameters stay float32
    c.model.remat = "none"  # none | full | dots
    c.model.scan_layers = False  # True: one nn.scan over layers (compile time flat in depth)
    c.model.float32_attention_logits = False  # True: scores + softmax in float32
    # ALBERT: embedding tables E wide, projected to hidden_size (0: E = hidden_size)
    c.model.embedding_size = 0
    c.model.share_layers = False  # ALBERT: one layer's parameters for every layer

    c.data.lower_case = True
    c.data.short_seq_prob = 0.1
    c.data.dupe_factor = 10  # times the corpus is paired, as create_pretraining_data
    c.data.mask_prob = 0.15
    c.data.max_predictions_per_seq = 20
    c.data.whole_word_masking = False

    c.phase2 = ml_collections.ConfigDict()
    c.phase2.fraction = 0.1  # last 10% of steps at length 512; 0 turns it off
    c.phase2.seq_len = 512
    c.phase2.global_batch_size = 256
    c.phase2.max_predictions_per_seq = 80
    return c


def t5_config() -> ml_collections.ConfigDict:
    """T5 1.0 Base, span corruption, packed 128 x 512 inputs, 2^19 steps (the T5 paper).

    The optimizer defaults to AdamW with linear warmup and decay; T5's own is
    `optimizer.name=adafactor`, `optimizer.schedule=rsqrt`, `learning_rate=0.01`,
    `warmup_steps=10000` (configs/t5.py:base,adafactor).
    """
    c = _shared_sections("t5", total_steps=2 ** 19, batch=128, seq_len=512,
                         learning_rate=1e-3, schedule="warmup_linear")
    # seq_len is the encoder inputs; targets length follows from the noise arithmetic
    c.z_loss = 0.0  # T5X's auxiliary log(Z)^2 term; 1e-4 when on

    c.model = ml_collections.ConfigDict()
    c.model.family = "t5"
    c.model.num_layers = 12  # encoder layers
    c.model.num_decoder_layers = 12
    c.model.hidden_size = 768  # d_model
    c.model.num_heads = 12
    c.model.head_dim = 64  # d_kv
    c.model.mlp_dim = 3072  # d_ff
    c.model.vocab_size = 32128  # 32000 pieces + 100 sentinels, padded to a multiple of 128
    c.model.feed_forward = "relu"  # relu (T5 1.0) | gated-gelu (T5 1.1)
    c.model.tie_output = True  # T5 1.0 ties; 1.1 has a separate output layer
    c.model.dropout_rate = 0.1
    c.model.layer_norm_eps = 1e-6
    c.model.relative_attention_num_buckets = 32
    c.model.relative_attention_max_distance = 128
    c.model.dtype = "float32"
    c.model.remat = "none"
    c.model.scan_layers = False
    c.model.float32_attention_logits = False

    # data.tokenizer: a SentencePiece model (T5's spiece.model or one we trained)
    c.data.lower_case = False
    c.data.noise_density = 0.15
    c.data.mean_noise_span_length = 3.0
    c.data.num_sentinels = 100
    c.data.docs_per_concat = 128  # t5 reduce_concat_tokens: documents joined before splitting
    c.data.max_doc_tokens = 65536  # t5 select_random_chunk
    return c


def _mlm_only(objective: str, family: str) -> ml_collections.ConfigDict:
    """BERT's keys without NSP's pairing and the two-phase schedule: one length."""
    c = default_config("bert")
    c.objective = objective
    c.model.family = family
    del c["phase2"]
    for key in ("short_seq_prob", "dupe_factor"):
        del c.data[key]
    return c


def roberta_config() -> ml_collections.ConfigDict:
    """RoBERTa-base (Liu et al. 2019): MLM only with dynamic masks, FULL-SENTENCES rows
    of 512 tokens that cross documents, byte-level BPE; see configs/roberta.py."""
    c = _mlm_only("roberta", "roberta")
    c.total_steps, c.global_batch_size, c.seq_len = 500_000, 8192, 512
    c.optimizer.learning_rate = 6e-4
    c.optimizer.warmup_steps = 24_000
    c.optimizer.schedule = "warmup_linear"
    c.optimizer.b2 = 0.98
    c.optimizer.eps = 1e-6
    c.optimizer.grad_clip = 0.0  # fairseq's recipe: --clip-norm 0.0
    c.model.vocab_size = 50265  # GPT-2's 50,257 pieces + <s> <pad> </s> <unk> + <mask>
    c.model.max_position_embeddings = 514
    c.model.position_offset = 2  # positions start at padding_idx + 1, as fairseq and HF
    c.model.type_vocab_size = 1
    c.model.layer_norm_eps = 1e-5
    c.model.hidden_act = "gelu"
    c.data.lower_case = False
    c.data.max_predictions_per_seq = 80  # 15% of 510 rounds to at most 77: never binds
    del c.data["whole_word_masking"]
    return c


def elmo_config() -> ml_collections.ConfigDict:
    """ELMo "original" (Peters et al. 2018; bilm-tf's 2x4096_512_2048cnn_2xhighway):
    the 1B Word Benchmark's 793,471-word vocabulary, 20-word rows, batch 3 x 128,
    10 epochs of its 769M words (1M steps), Adagrad at 0.2 (accumulators from 1.0),
    gradients clipped at norm 10, dropout 0.1. bilm-tf trains the softmax by sampling
    8,192 negatives; here it is computed in full."""
    c = _shared_sections("elmo", total_steps=1_000_000, batch=384, seq_len=20,
                         learning_rate=0.2, schedule="constant")
    c.optimizer.name = "adagrad"
    c.optimizer.warmup_steps = 0
    c.optimizer.weight_decay = 0.0
    c.optimizer.grad_clip = 10.0
    c.optimizer.initial_accumulator = 1.0
    c.model = ml_collections.ConfigDict()
    c.model.family = "elmo"
    c.model.char_embed_dim = 16
    c.model.filters = "1:32,2:32,3:64,4:128,5:256,6:512,7:1024"  # width:count, 2048 in all
    c.model.max_chars = 50  # bytes of a word, with its begin and end markers
    c.model.num_highway = 2
    c.model.lstm_dim = 4096
    c.model.projection_dim = 512
    c.model.num_layers = 2
    c.model.cell_clip = 3.0
    c.model.proj_clip = 3.0
    c.model.vocab_size = 793_471  # softmax words; rarer words are read but predicted as <UNK>
    c.model.dropout_rate = 0.1
    c.model.dtype = "float32"
    c.model.remat = "none"
    c.model.scan_layers = False
    c.data.lower_case = False
    return c


def spanbert_config() -> ml_collections.ConfigDict:
    """SpanBERT-base (Joshi et al. 2020): span masking + span boundary objective, single
    512-token segments, cased WordPiece; see configs/spanbert.py."""
    c = _mlm_only("spanbert", "spanbert")
    c.total_steps, c.global_batch_size, c.seq_len = 2_400_000, 256, 512
    c.optimizer.learning_rate = 1e-4
    c.optimizer.warmup_steps = 10_000
    c.optimizer.schedule = "warmup_linear"
    c.model.vocab_size = 28996  # bert-base-cased
    c.model.hidden_act = "gelu"
    c.model.sbo_max_span_tokens = 32  # relative positions of the SBO head (longer: clipped)
    c.data.lower_case = False
    c.data.max_predictions_per_seq = 80
    c.data.geometric_p = 0.2
    c.data.max_span_words = 10
    del c.data["whole_word_masking"]  # spans are whole words by definition
    return c


def albert_config() -> ml_collections.ConfigDict:
    """ALBERT-base v2 (Lan et al. 2020, google-research/albert): BERT's encoder with
    128-wide factorised embeddings and one layer's parameters shared by all 12,
    n-gram masking (n <= 3) and sentence-order prediction instead of NSP; 125K steps
    of 4,096 x 512 tokens (10% of pairs shorter), LAMB lr 0.00176, 3,125 warmup
    steps, linear decay, dropout 0 (v2; v1 had 0.1), 30,000 SentencePiece pieces;
    see configs/albert.py."""
    c = default_config("bert")
    c.objective = "albert"
    c.model.family = "albert"
    del c["phase2"]  # one length throughout
    del c.data["whole_word_masking"]  # n-grams are whole words by definition
    c.total_steps, c.global_batch_size, c.seq_len = 125_000, 4096, 512
    c.optimizer.name = "lamb"
    c.optimizer.learning_rate = 0.00176
    c.optimizer.warmup_steps = 3125
    c.optimizer.schedule = "bert_linear"  # albert's optimization.py: BERT's, to the letter
    c.optimizer.b1, c.optimizer.b2, c.optimizer.eps = 0.9, 0.999, 1e-6
    c.optimizer.weight_decay = 0.01
    c.optimizer.grad_clip = 1.0
    c.model.vocab_size = 30000
    c.model.embedding_size = 128
    c.model.share_layers = True
    c.model.dropout_rate = 0.0
    c.model.attention_dropout_rate = 0.0
    c.model.hidden_act = "gelu_tanh"  # albert's modeling.py gelu (HF: gelu_new)
    c.data.lower_case = True
    c.data.short_seq_prob = 0.1
    c.data.dupe_factor = 40  # create_pretraining_data's default (masks are dynamic here)
    # 15% of 509 tokens is at most 77; google-research/albert's flag default of 20
    # would cap the rate at 4% of a 512-token row.
    c.data.max_predictions_per_seq = 80
    c.data.max_ngram = 3
    return c


def electra_config() -> ml_collections.ConfigDict:
    """ELECTRA-Small (Clark et al. 2020; google-research/electra's defaults): a generator
    1/4 as wide trained by MLM and the discriminator by replaced token detection, loss
    MLM + 50 x RTD, one embedding block (E = 128) for both; see configs/electra.py."""
    c = _mlm_only("electra", "electra")
    c.total_steps, c.global_batch_size, c.seq_len = 1_000_000, 128, 128
    c.optimizer.learning_rate = 5e-4
    c.optimizer.warmup_steps = 10_000
    c.optimizer.schedule = "bert_linear"
    c.model.update(num_layers=12, hidden_size=256, num_heads=4, mlp_dim=1024,
                   embedding_size=128)
    c.model.generator_size = 0.25  # of hidden size, FFN size and heads (1/3 for Base)
    c.model.generator_layers = 1.0  # of num_layers
    c.gen_weight = 1.0  # the generator's MLM loss
    c.disc_weight = 50.0  # the discriminator's replaced token detection loss
    c.data.max_predictions_per_seq = 19  # int((0.15 + 0.005) * 128), ELECTRA's rule
    del c.data["whole_word_masking"]
    return c


def gpt2_config() -> ml_collections.ConfigDict:
    """GPT-2 small (124M) as Radford et al. (2019) describe it: context 1024, batch 512,
    50,257 byte-level BPE tokens, pre-LN, dropout 0.1. The paper leaves the optimizer
    to GPT-1's (Radford et al. 2018): Adam, peak lr 2.5e-4 after a 2,000-step linear
    warmup, cosine decay to 0, weight decay 0.01. Steps are not published: 600k
    (about 315B tokens, what open reproductions of the 124M model train)."""
    c = _shared_sections("causal_lm", total_steps=600_000, batch=512, seq_len=1024,
                         learning_rate=2.5e-4, schedule="cosine")
    c.optimizer.warmup_steps = 2000
    c.optimizer.eps = 1e-8
    c.model = ml_collections.ConfigDict()
    c.model.family = "gpt2"
    c.model.num_layers = 12
    c.model.hidden_size = 768
    c.model.num_heads = 12
    c.model.mlp_dim = 3072
    c.model.vocab_size = 50257
    c.model.max_position_embeddings = 1024
    c.model.dropout_rate = 0.1  # embeddings, residual branches
    c.model.attention_dropout_rate = 0.1
    c.model.layer_norm_eps = 1e-5
    c.model.initializer_range = 0.02
    c.model.hidden_act = "gelu_tanh"
    c.model.dtype = "float32"
    c.model.remat = "none"
    c.model.scan_layers = False
    c.model.float32_attention_logits = False
    c.data.lower_case = False
    return c


_DTYPES = ("float32", "bfloat16", "float16")
_REMAT = ("none", "full", "dots")
_SCHEDULES = ("bert_linear", "warmup_linear", "constant", "rsqrt", "cosine")
_OPTIMIZERS = ("adamw", "adafactor", "adagrad", "lamb")


def flatten(cfg, prefix="") -> dict:
    """{"a.b": value} of a config (or of its JSON as a dict)."""
    out = {}
    for key, value in cfg.items():
        name = f"{prefix}{key}"
        if isinstance(value, (ml_collections.ConfigDict, dict)):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def _check_keys(cfg) -> None:
    objective = cfg.get("objective", "bert")
    if objective not in OBJECTIVES:
        raise UserError(f"config key 'objective' is {objective!r}; expected one of "
                        f"{', '.join(OBJECTIVES)}")
    known = flatten(default_config(objective))
    known_groups = {k.rsplit(".", 1)[0] for k in known if "." in k}
    for name in flatten(cfg):
        if name not in known and name not in known_groups:
            raise UserError(f"unknown config key '{name}'")


def check_positive(cfg, *names):
    flat = flatten(cfg)
    for name in names:
        value = flat[name]
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise UserError(f"config key '{name}' must be a positive integer, got {value!r}")


def _choice(value, name, choices):
    if value not in choices:
        raise UserError(f"config key '{name}' is {value!r}; expected one of {', '.join(choices)}")


def validate(cfg: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """Refuse what cannot train, naming the key. Returns cfg for chaining."""
    _check_keys(cfg)
    check_positive(cfg, "total_steps", "global_batch_size", "seq_len", "micro_batches", "log_every",
              "eval_every", "eval_steps", "checkpoint_every", "keep_checkpoints",
              "max_skipped_steps", "model.num_layers", "model.vocab_size")
    m = cfg.model
    _choice(cfg.optimizer.name, "optimizer.name", _OPTIMIZERS)
    if cfg.objective == "elmo":
        return _validate_elmo(cfg)
    check_positive(cfg, "model.hidden_size", "model.num_heads", "model.mlp_dim")
    if cfg.objective == "t5":
        return _validate_t5(cfg)
    if cfg.objective == "causal_lm":
        return _validate_causal_lm(cfg)
    check_positive(cfg, "model.max_position_embeddings", "data.max_predictions_per_seq")
    if cfg.objective in ("bert", "albert"):
        check_positive(cfg, "data.dupe_factor")
    if cfg.objective == "albert":
        check_positive(cfg, "data.max_ngram")
    if cfg.objective == "spanbert":
        _validate_spanbert(cfg)
    if cfg.objective == "electra":
        _validate_electra(cfg)
    if m.hidden_size % m.num_heads:
        raise UserError(f"model.hidden_size={m.hidden_size} is not divisible by "
                        f"model.num_heads={m.num_heads}")
    embedding_size = m.get("embedding_size", 0)
    if isinstance(embedding_size, bool) or not isinstance(embedding_size, int) \
            or embedding_size < 0:
        raise UserError(f"config key 'model.embedding_size' must be an integer >= 0 "
                        f"(0: hidden_size), got {embedding_size!r}")
    if not isinstance(m.get("share_layers", False), bool):
        raise UserError(f"config key 'model.share_layers' must be True or False, "
                        f"got {m.share_layers!r}")
    _validate_common(cfg)
    if "phase2" in cfg and not 0.0 <= cfg.phase2.fraction < 1.0:
        raise UserError(f"phase2.fraction={cfg.phase2.fraction} must be in [0, 1)")
    if not 0.0 < cfg.data.mask_prob < 1.0:
        raise UserError(f"data.mask_prob={cfg.data.mask_prob} must be in (0, 1)")
    for phase in phases(cfg):
        offset = m.get("position_offset", 0)
        if phase.seq_len + offset > m.max_position_embeddings:
            raise UserError(
                f"{phase.prefix}seq_len={phase.seq_len}"
                + (f" + model.position_offset={offset}" if offset else "")
                + f" exceeds model.max_position_embeddings={m.max_position_embeddings}")
        if phase.global_batch_size % cfg.micro_batches:
            raise UserError(
                f"{phase.prefix}global_batch_size={phase.global_batch_size} is not divisible "
                f"by micro_batches={cfg.micro_batches}")
        if phase.max_predictions > phase.seq_len:
            raise UserError(f"max_predictions_per_seq={phase.max_predictions} exceeds "
                            f"{phase.prefix}seq_len={phase.seq_len}")
    return cfg


def _validate_electra(cfg):
    m = cfg.model
    for name, value in (("model.generator_size", m.generator_size),
                        ("model.generator_layers", m.generator_layers)):
        if not 0.0 < value <= 1.0:
            raise UserError(f"{name}={value} must be in (0, 1]")
    for name in ("gen_weight", "disc_weight"):
        if cfg[name] < 0:
            raise UserError(f"{name}={cfg[name]} must be >= 0")


def _validate_spanbert(cfg):
    check_positive(cfg, "data.max_span_words", "model.sbo_max_span_tokens")
    if not 0.0 < cfg.data.geometric_p <= 1.0:
        raise UserError(f"data.geometric_p={cfg.data.geometric_p} must be in (0, 1]")


def _validate_common(cfg):
    m = cfg.model
    _choice(m.dtype, "model.dtype", _DTYPES)
    _choice(m.remat, "model.remat", _REMAT)
    _choice(cfg.optimizer.schedule, "optimizer.schedule", _SCHEDULES)
    _choice(cfg.data.format, "data.format", ("auto", "sentences", "text"))
    _choice(cfg.data.tfds_reader, "data.tfds_reader", ("data_source", "tf"))
    check_positive(cfg, "data.docs_per_shard")
    workers = cfg.data.worker_processes
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise UserError(f"config key 'data.worker_processes' must be an integer >= 0, "
                        f"got {workers!r}")
    for name in ("mesh.data", "mesh.fsdp", "mesh.tensor"):
        value = flatten(cfg)[name]
        if not isinstance(value, int) or (value < 1 and value != -1):
            raise UserError(f"config key '{name}' must be a positive integer or -1, got {value!r}")
    if cfg.optimizer.learning_rate <= 0:
        raise UserError(f"optimizer.learning_rate={cfg.optimizer.learning_rate} must be positive")
    if cfg.optimizer.warmup_steps < 0:
        raise UserError(f"optimizer.warmup_steps={cfg.optimizer.warmup_steps} must be >= 0")
    for name in ("profile_steps", "profile_start_step"):
        if cfg[name] < 0:
            raise UserError(f"{name}={cfg[name]} must be >= 0")
    if cfg.global_batch_size % cfg.micro_batches:
        raise UserError(f"global_batch_size={cfg.global_batch_size} is not divisible by "
                        f"micro_batches={cfg.micro_batches}")


def _validate_t5(cfg):
    check_positive(cfg, "model.num_decoder_layers", "model.head_dim", "data.num_sentinels",
              "data.docs_per_concat", "data.max_doc_tokens",
              "model.relative_attention_num_buckets", "model.relative_attention_max_distance")
    _validate_common(cfg)
    _choice(cfg.model.feed_forward, "model.feed_forward", ("relu", "gated-gelu"))
    if not 0.0 < cfg.data.noise_density < 1.0:
        raise UserError(f"data.noise_density={cfg.data.noise_density} must be in (0, 1)")
    if cfg.data.mean_noise_span_length < 1.0:
        raise UserError(f"data.mean_noise_span_length={cfg.data.mean_noise_span_length} "
                        "must be >= 1")
    if cfg.z_loss < 0:
        raise UserError(f"z_loss={cfg.z_loss} must be >= 0")
    return cfg


def _validate_elmo(cfg):
    check_positive(cfg, "model.char_embed_dim", "model.max_chars", "model.lstm_dim",
                   "model.projection_dim")
    _validate_common(cfg)
    try:
        from pretrainx.models.elmo import parse_filters
        filters = parse_filters(cfg.model.filters)
    except ValueError:
        raise UserError(f"model.filters={cfg.model.filters!r}: expected width:count pairs "
                        "separated by commas, e.g. 1:32,2:32,3:64") from None
    widest = max(w for w, _ in filters)
    if widest > cfg.model.max_chars:
        raise UserError(f"model.filters has width {widest} > model.max_chars="
                        f"{cfg.model.max_chars}")
    if cfg.model.max_chars < 3:
        raise UserError(f"model.max_chars={cfg.model.max_chars} must be at least 3")
    return cfg


def _validate_causal_lm(cfg):
    m = cfg.model
    check_positive(cfg, "model.max_position_embeddings")
    _validate_common(cfg)
    if m.hidden_size % m.num_heads:
        raise UserError(f"model.hidden_size={m.hidden_size} is not divisible by "
                        f"model.num_heads={m.num_heads}")
    if cfg.seq_len > m.max_position_embeddings:
        raise UserError(f"seq_len={cfg.seq_len} exceeds model.max_position_embeddings="
                        f"{m.max_position_embeddings}")
    return cfg


def require_data(cfg) -> None:
    """Training (unlike --describe) needs a corpus and a vocabulary."""
    for name in ("data.train_files", "data.tokenizer"):
        if not flatten(cfg)[name]:
            raise UserError(f"config key '{name}' is empty; set it with --config.{name}=...")


class Phase:
    """A stretch of training with one sequence length and batch size."""

    def __init__(self, index, start, end, seq_len, global_batch_size, max_predictions, prefix):
        self.index, self.start, self.end = index, start, end
        self.seq_len, self.global_batch_size = seq_len, global_batch_size
        self.max_predictions, self.prefix = max_predictions, prefix

    def __repr__(self):
        return (f"Phase({self.index}: steps [{self.start}, {self.end}), seq_len={self.seq_len}, "
                f"global_batch_size={self.global_batch_size})")


def phases(cfg) -> list:
    """The BERT recipe's phases: 90% of steps at 128, the rest at 512 (phase2.fraction)."""
    total = cfg.total_steps
    n2 = int(round(total * cfg.phase2.fraction)) if "phase2" in cfg else 0
    first = Phase(1, 0, total - n2, cfg.seq_len, cfg.global_batch_size,
                  cfg.data.get("max_predictions_per_seq", 0), "")
    if n2 == 0:
        return [first]
    second = Phase(2, total - n2, total, cfg.phase2.seq_len, cfg.phase2.global_batch_size,
                   cfg.phase2.max_predictions_per_seq, "phase2.")
    return [first, second] if first.end > 0 else [second]


def phase_at(cfg, step: int) -> Phase:
    for phase in phases(cfg):
        if step < phase.end:
            return phase
    return phases(cfg)[-1]


def load_file(spec: str) -> ml_collections.ConfigDict:
    """A recipe file as `--config=` reads it ("configs/t5.py:base,adafactor" passes the
    part after the colon to get_config), for notebooks and sweeps that build configs
    in Python."""
    path, _, arg = spec.partition(":")
    if not os.path.isfile(path):
        raise UserError(f"config file {path} not found")
    return sibling_config(os.path.abspath(path), os.path.basename(path), arg or None)


def sibling_config(this_file: str, name: str, arg=None):
    """get_config(arg) of another recipe file in the same folder, so that one recipe
    (configs/bert.py) serves several named configs (bert_base.py, bert_large.py)."""
    import importlib.util
    import os
    path = os.path.join(os.path.dirname(os.path.abspath(this_file)), name)
    spec = importlib.util.spec_from_file_location(f"pretrainx_recipe_{name[:-3]}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config() if arg is None else module.get_config(arg)
