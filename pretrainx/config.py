"""What every run's config shares: trainer, mesh, optimizer, data and checkpoint keys,
their checks, and loading recipe files (a run's phases: phasing.py).

A family's own keys and checks live in its spec (`pretrainx/families/NAME/spec.py`,
read through `pretrainx.objectives`); a recipe in `configs/` starts from the
objective's defaults and states only what differs. A key the objective's defaults
lack is a typo and is refused, so that a sweep over a misspelt field fails loudly
instead of silently training the default.
"""

import importlib.util
import os

import ml_collections

from pretrainx.errors import UserError
from pretrainx.phasing import Phase, phase_at, phases  # noqa: F401 (read as config.*)

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


def probe_defaults() -> ml_collections.ConfigDict:
    """Downstream probes (train/downstream.py, python -m pretrainx.probe): every
    `every_steps` (a multiple of checkpoint_every) a background process fine-tunes
    that checkpoint on a small labelled task and the run logs probe/* scalars."""
    p = ml_collections.ConfigDict()
    # sst2, mrpc, cola, ..., conll2003, contrastive (STS-B after contrastive training);
    # with no fine-tuning: cloze, sts (STS-B zero-shot), retrieval; "" = none
    p.task = ""
    p.every_steps = 0
    p.glue_dir = ""  # the GLUE folder (CoNLL-2003/ inside it)
    p.probes = ""  # task cloze: its TSV (pretrainx/evaluate/cloze.py); "" = the shipped set
    p.retrieval_dir = ""  # task retrieval: a BEIR-layout folder (pretrainx/evaluate/retrieval.py)
    p.max_train_examples = 2000
    p.holdout_examples = 400  # of those: they choose the epoch (dev is reported)
    p.epochs = 3
    p.learning_rate = 3e-4
    p.seq_len = 128
    p.global_batch_size = 32
    p.platform = "cpu"  # the background process's JAX_PLATFORMS: the run holds the chips
    return p


def probe_missing(probe) -> str:
    """What probe.task lacks to run (its data folder), or ""."""
    if not probe.get("task"):
        return ("probe.task is empty: --config.probe.task=sst2 --config.probe.glue_dir=DIR, "
                "or --config.probe.task=cloze")
    if probe.task == "cloze":
        return ""
    if probe.task == "retrieval":
        return "" if probe.get("retrieval_dir") else (
            "probe.retrieval_dir is empty: task retrieval reads a BEIR-layout folder")
    return "" if probe.get("glue_dir") else (
        f"probe.glue_dir is empty: task {probe.task} reads its data there")


def optimizer_config(learning_rate: float, schedule: str, **given) -> ml_collections.ConfigDict:
    """The optimizer keys every run has, pretraining's and fine-tuning's, with the values
    `given` instead; a key given that is not one of them is the caller's own (what a
    family's schedule or optimizer `needs`, fine-tuning's layer-wise keys)."""
    o = ml_collections.ConfigDict()
    # one of train/optim.py's OPTIMIZERS (adamw, adafactor, lamb, ...)
    o.name = given.pop("name", "adamw")
    o.learning_rate = learning_rate
    # one of train/schedules.py's SCHEDULES (bert_linear, cosine, rsqrt, ...), with the keys
    # it needs set by the recipes that use it
    o.schedule = schedule
    o.b1 = given.pop("b1", 0.9)
    o.b2 = given.pop("b2", 0.999)
    o.eps = given.pop("eps", 1e-6)
    # Adam's moments divided by 1 - b^t (Kingma and Ba; optax, fairseq, HF); False is
    # google-research/bert's AdamWeightDecayOptimizer, which has no correction.
    o.bias_correction = given.pop("bias_correction", True)
    o.weight_decay = given.pop("weight_decay", 0.01)
    o.grad_clip = given.pop("grad_clip", 1.0)
    # schedule slanted_triangular: peak / lowest rate (ULMFiT)
    o.stlr_ratio = given.pop("stlr_ratio", 32.0)
    # > 0: a wall-clock budget (train/budget.py): the schedule runs over this many hours
    # of elapsed time, total_steps only bounds the run, which ends when the time is spent
    o.budget_hours = given.pop("budget_hours", 0.0)
    # A batch-size ramp by accumulation (train/ramp.py): an update averages up to
    # accumulate_to steps (global_batch_size is then the micro-batch), reached at
    # batch_ramp of the run (of the budget's time, or of total_steps); 0: from the start.
    # batch_ramp_shape: linear (the crammed BERT's) | equal_updates (ModernBERT's).
    o.accumulate_to = given.pop("accumulate_to", 1)
    o.batch_ramp = given.pop("batch_ramp", 0.0)
    o.batch_ramp_shape = given.pop("batch_ramp_shape", "linear")
    # > 0: a moving average of the parameters (0.999: about the last 1,000 updates) in the
    # optimizer state; `python -m pretrainx.merge --from_ema` makes a workdir of it.
    o.ema_decay = given.pop("ema_decay", 0.0)
    o.update(given)
    return o


def shared_config(objective: str, total_steps: int, batch: int, seq_len: int,
                     learning_rate: float, schedule: str,
                     **optimizer) -> ml_collections.ConfigDict:
    """The keys every run has (run length and logging, mesh, optimizer, data files),
    with the values given; an objective's defaults add its model and data keys.
    `optimizer` holds the family's values of optimizer_config's keys and of
    warmup_steps (its paper's), so that each key is set once, to its value."""
    opt = dict(optimizer)
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.objective = objective
    # Continued pretraining: start from a model (HF directory, google-research BERT,
    # or another run's workdir) instead of random weights; the model keys must match it.
    c.init_from = ""
    c.total_steps = total_steps
    # The lifecycle's phases by name (pretrainx/phasing.py): "pretrain,extension,decay",
    # each phases.NAME setting its steps (or tokens) and what it changes; "" = one phase
    # (or BERT's phase2). start_phase: a fresh run (from init_from) starts at that phase,
    # its schedule and data, with a fresh optimizer state.
    c.phase_order = ""
    c.phases = ml_collections.ConfigDict()
    c.start_phase = ""
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
    # Within a slice (the fast interconnect): -1 takes the devices the others leave.
    c.mesh.data = -1
    c.mesh.fsdp = 1
    c.mesh.tensor = 1
    # Across slices (the data-center network): how many slices the data and fsdp axes
    # span; the mesh's data axis is mesh.data x mesh.dcn_data. -1: all slices.
    c.mesh.dcn_data = -1
    c.mesh.dcn_fsdp = 1
    # ZeRO-1: parameters replicated over the data axes as in data parallelism, the
    # optimizer state and its update split over them (1/N of the moments per device,
    # no device repeating another's update); train/step.py says how.
    c.mesh.shard_optimizer = False
    c.sharding_rules = DEFAULT_SHARDING_RULES

    warmup_steps = opt.pop("warmup_steps", 10_000)
    c.optimizer = optimizer_config(learning_rate, schedule, **opt)
    c.optimizer.warmup_steps = warmup_steps
    c.probe = probe_defaults()
    # Weights & Biases (train/wandb_log.py): metrics.jsonl's records and this config from
    # process 0. Entity "": W&B's default; run name "": the workdir's; tags comma-separated.
    c.logging = ml_collections.ConfigDict(dict(
        wandb=False, wandb_project="pretrainx", wandb_entity="", wandb_run_name="",
        wandb_tags=""))

    c.data = ml_collections.ConfigDict()
    c.data.train_files = ""
    c.data.eval_files = ""
    # one of data/formats.py's TEXT_FORMATS: auto, sentences, text, tsv (a task's text
    # columns, data.text_field), conll
    c.data.format = "auto"
    c.data.tokenizer = ""
    # train_files: comma-separated globs (text, .gz, .jsonl) or tfds:NAME[@SPLIT];
    # ';' separates sources, mixed by train_weights (equal when empty).
    c.data.train_weights = ""
    # Without train_weights: sources sampled with probability ~ tokens^alpha (XLM-R 0.3,
    # mBERT 0.7; tokens counted once, as prepare stores them); 0: equal weights.
    c.data.mixing_alpha = 0.0
    c.data.train_source_names = ""  # one name a source ("en,de"): --stats and eval records
    # > 0 (and no eval_files): the first N% of each train source's documents are held
    # out as that source's eval set (HF run_mlm's validation_split_percentage).
    c.data.eval_split_percent = 0.0
    c.data.text_field = "text"  # the JSONL / TFDS field (TSV columns) that holds the text
    c.data.skip_bad_lines = False  # True: skip and count bad JSONL lines, cut truncated .gz
    c.data.tfds_data_dir = ""  # where tfds: datasets are prepared (local or gs://)
    c.data.tfds_reader = "data_source"  # data_source (ArrayRecord, no TF) | tf (tfds.load)
    c.data.docs_per_shard = 10_000  # documents an objective pairs/joins within (one shard)
    c.data.prepared_dir = ""  # output of `python -m pretrainx.data prepare`: read ids only
    c.data.worker_processes = 0  # grain processes for the batch transforms (0: threads)
    return c


_DTYPES = ("float32", "bfloat16")
_REMAT = ("none", "full", "dots")


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


def check_positive(cfg, *names):
    flat = flatten(cfg)
    for name in names:
        value = flat[name]
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise UserError(f"config key '{name}' must be a positive integer, got {value!r}")


def choice(value, name, choices):
    if value not in choices:
        raise UserError(f"config key '{name}' is {value!r}; expected one of {', '.join(choices)}")


def check_keys(cfg, known_cfg) -> None:
    """Refuse a key that `known_cfg` (the objective's defaults) lacks: a typo."""
    known = flatten(known_cfg)
    known_groups = {k.rsplit(".", 1)[0] for k in known if "." in k}
    for name in flatten(cfg):
        if name.startswith("phases."):  # a phase's keys: checked against the run's (phasing)
            continue
        if name not in known and name not in known_groups:
            raise UserError(f"unknown config key '{name}'")


def check_fraction(cfg, name: str, low: float, high: float, closed_high: bool = False):
    """`name` (dotted) in (low, high), or (low, high] when closed_high."""
    value = flatten(cfg)[name]
    if not (low < value <= high if closed_high else low < value < high):
        raise UserError(f"{name}={value} must be in ({low:g}, {high:g}{']' if closed_high else ')'}")


def check_divisible(cfg) -> None:
    """model.hidden_size a multiple of model.num_heads, as every attention layer needs."""
    m = cfg.model
    if m.hidden_size % m.num_heads:
        raise UserError(f"model.hidden_size={m.hidden_size} is not divisible by "
                        f"model.num_heads={m.num_heads}")


def validate_shared(cfg) -> None:
    """The checks every run shares; an objective's `validate` adds its own."""
    check_positive(cfg, "total_steps", "global_batch_size", "seq_len", "micro_batches",
                   "log_every", "eval_every", "eval_steps", "checkpoint_every",
                   "keep_checkpoints", "max_skipped_steps", "model.vocab_size",
                   # a model of layers (word vectors have none)
                   *(["model.num_layers"] if "num_layers" in cfg.model else []))
    m = cfg.model
    if m.dtype == "float16":  # refused, not half-supported: see docs/troubleshooting.md
        raise UserError("model.dtype=float16 is not supported for training: its 5-bit "
                        "exponent underflows gradients without loss scaling, which pretrainx "
                        "does not do; use bfloat16 (same speed on TPUs and recent GPUs)")
    choice(m.dtype, "model.dtype", _DTYPES)
    choice(m.remat, "model.remat", _REMAT)
    choice(cfg.data.tfds_reader, "data.tfds_reader", ("data_source", "tf"))
    check_positive(cfg, "data.docs_per_shard")
    _check_sources(cfg.data)
    workers = cfg.data.worker_processes
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise UserError(f"config key 'data.worker_processes' must be an integer >= 0, "
                        f"got {workers!r}")
    for name in ("mesh.data", "mesh.fsdp", "mesh.tensor", "mesh.dcn_data", "mesh.dcn_fsdp"):
        value = flatten(cfg)[name]
        if not isinstance(value, int) or (value < 1 and value != -1):
            raise UserError(f"config key '{name}' must be a positive integer or -1, got {value!r}")
    if cfg.optimizer.learning_rate <= 0:
        raise UserError(f"optimizer.learning_rate={cfg.optimizer.learning_rate} must be positive")
    budget = cfg.optimizer.budget_hours
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or budget < 0:
        raise UserError(f"optimizer.budget_hours={budget!r} must be a number >= 0 (0: no "
                        "budget; the schedule runs over total_steps)")
    _check_probe(cfg)
    _check_ramp(cfg)
    if cfg.logging.wandb and importlib.util.find_spec("wandb") is None:
        raise UserError("logging.wandb=True needs the wandb package: pip install -e \".[wandb]\"")
    ema = cfg.optimizer.ema_decay
    if isinstance(ema, bool) or not isinstance(ema, (int, float)) or not 0 <= ema < 1:
        raise UserError(f"optimizer.ema_decay={ema!r} must be in [0, 1) (0: no average)")
    if cfg.optimizer.warmup_steps < 0:
        raise UserError(f"optimizer.warmup_steps={cfg.optimizer.warmup_steps} must be >= 0")
    for name in ("profile_steps", "profile_start_step"):
        if cfg[name] < 0:
            raise UserError(f"{name}={cfg[name]} must be >= 0")
    if cfg.global_batch_size % cfg.micro_batches:
        raise UserError(f"global_batch_size={cfg.global_batch_size} is not divisible by "
                        f"micro_batches={cfg.micro_batches}")


def _check_ramp(cfg) -> None:
    o = cfg.optimizer
    full = o.accumulate_to
    if isinstance(full, bool) or not isinstance(full, int) or full < 1:
        raise UserError(f"optimizer.accumulate_to={full!r} must be an integer >= 1")
    ramp = o.batch_ramp
    if isinstance(ramp, bool) or not isinstance(ramp, (int, float)) or not 0 <= ramp < 1:
        raise UserError(f"optimizer.batch_ramp={ramp!r} must be in [0, 1) (the run's fraction "
                        "at which accumulate_to is reached; 0: no ramp)")
    choice(o.batch_ramp_shape, "optimizer.batch_ramp_shape",
           ("linear", "equal_updates"))
    if (full > 1 or ramp) and cfg.micro_batches != 1:
        raise UserError("micro_batches > 1 with optimizer.accumulate_to or batch_ramp: the ramp "
                        "accumulates whole steps; leave micro_batches=1")


def _check_probe(cfg) -> None:
    probe = cfg.probe
    if not probe.every_steps:
        return
    if probe.every_steps < 0 or probe.every_steps % cfg.checkpoint_every:
        raise UserError(f"probe.every_steps={probe.every_steps} must be a multiple of "
                        f"checkpoint_every={cfg.checkpoint_every}: a probe fine-tunes a checkpoint")
    missing = probe_missing(probe)
    if missing:
        raise UserError(f"probe.every_steps is set but {missing}")


def _check_sources(data) -> None:
    alpha = data.mixing_alpha
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 <= alpha <= 1:
        raise UserError(f"config key 'data.mixing_alpha' is {alpha!r}; expected a number in "
                        "(0, 1] (XLM-R: 0.3, mBERT: 0.7), or 0 for no temperature sampling")
    split = data.eval_split_percent
    if isinstance(split, bool) or not isinstance(split, (int, float)) or not 0 <= split < 50:
        raise UserError(f"config key 'data.eval_split_percent' is {split!r}; expected a "
                        "percentage in [0, 50)")
    if split and data.eval_files:
        raise UserError("config keys 'data.eval_split_percent' and 'data.eval_files' are both "
                        "set; hold out part of the train sources or name eval files, not both")
    if split and data.prepared_dir:
        raise UserError("config key 'data.eval_split_percent' needs the text sources; with "
                        "'data.prepared_dir' set, prepare the eval files and name them in "
                        "data.eval_files")


def require_data(cfg) -> None:
    """Training (unlike --describe) needs a corpus and a vocabulary."""
    for name in ("data.train_files", "data.tokenizer"):
        if not flatten(cfg)[name]:
            raise UserError(f"config key '{name}' is empty; set it with --config.{name}=...")


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
    path = os.path.join(os.path.dirname(os.path.abspath(this_file)), name)
    spec = importlib.util.spec_from_file_location(f"pretrainx_recipe_{name[:-3]}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config() if arg is None else module.get_config(arg)
