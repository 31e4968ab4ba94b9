"""A run's phases from its config: which steps each covers and what it changes.

Two ways to state them. BERT's recipe: `phase2` (its last `fraction` of the steps at
another length and batch). The modern encoder's lifecycle (ModernBERT, NeoBERT, Ettin,
mmBERT): `phase_order = "pretrain,extension,decay"` and under `phases.NAME` what each
phase sets (its `steps` or `tokens`, the last one taking the rest of total_steps), a
nested part of the config: `phases.extension.seq_len = 8192`,
`phases.extension.model.global_rope_theta = 160_000.0`, `phases.decay.data.train_files`,
`phases.decay.data.mask_prob`, `phases.decay.optimizer.schedule`. A key a phase does not
set carries over from the phase before it. Each phase's config is the run's with its
keys applied (`Phase.cfg`), which the phase's objective, model, data and schedule read.

A phase may change what does not change the parameters or the optimizer's state:
length and batch, the objective (another of the family's whose model has the same
parameters: causal LM then MLM, with the attention each needs), data keys (files, mix,
masking), model keys that keep every parameter's shape (RoPE bases, windows:
train/run.py compares the shapes) and the learning-rate schedule's keys. A phase that
sets a schedule key starts a new segment of the schedule, counted from its first step
over it and the phases after it that set none (`train/phases.learning_rate`).
"""

import copy
import math

import ml_collections

from pretrainx.errors import UserError

# Optimizer keys a phase may set: the learning-rate schedule's. Setting one starts a
# new schedule segment at the phase.
SCHEDULE_KEYS = ("learning_rate", "warmup_steps", "schedule", "decay_steps",
                 "final_lr_fraction", "stlr_ratio", "cycle_start", "cycle_falloff")
_LENGTH_KEYS = ("steps", "tokens")
# objective: another of the family's objectives over the same parameters (CLM then MLM,
# Gisserot-Boukhlef et al. 2025); objectives.validate and train/run.py hold it to that
_TOP_KEYS = ("seq_len", "global_batch_size", "objective")
_FIXED_DATA_KEYS = ("tokenizer", "lower_case", "prepared_dir")


class Phase:
    """A stretch of training with one config: steps [start, end), its length and batch,
    its name ("" for BERT's phase2 form) and `cfg`, the run's config as this phase sees
    it (the run's own where the phase changes only length and batch)."""

    def __init__(self, index, start, end, seq_len, global_batch_size, max_predictions, prefix,
                 name="", cfg=None, changes=()):
        self.index, self.start, self.end = index, start, end
        self.seq_len, self.global_batch_size = seq_len, global_batch_size
        self.max_predictions, self.prefix = max_predictions, prefix
        self.name, self.cfg, self.changes = name, cfg, tuple(changes)

    @property
    def label(self) -> str:
        return self.name or f"phase {self.index}"

    def __repr__(self):
        return (f"Phase({self.index}{' ' + self.name if self.name else ''}: steps "
                f"[{self.start}, {self.end}), seq_len={self.seq_len}, "
                f"global_batch_size={self.global_batch_size})")


def named(cfg) -> bool:
    """The run states its phases by name (phase_order)."""
    return bool(cfg.phase_order)


def phases(cfg) -> list:
    """The run's phases, in order."""
    if named(cfg):
        return _named_phases(cfg)
    total = cfg.total_steps
    n2 = int(round(total * cfg.phase2.fraction)) if "phase2" in cfg else 0
    first = Phase(1, 0, total - n2, cfg.seq_len, cfg.global_batch_size,
                  cfg.data.get("max_predictions_per_seq", 0), "", cfg=cfg)
    if n2 == 0:
        return [first]
    second = Phase(2, total - n2, total, cfg.phase2.seq_len, cfg.phase2.global_batch_size,
                   cfg.phase2.max_predictions_per_seq, "phase2.", cfg=cfg)
    return [first, second] if first.end > 0 else [second]


def phase_at(cfg, step: int) -> Phase:
    return at(phases(cfg), step)


def at(every: list, step: int) -> Phase:
    """Of a run's phases (`phases(cfg)`, computed once), the one that trains `step`."""
    for phase in every:
        if step < phase.end:
            return phase
    return every[-1]


def by_name(cfg, name: str, key: str = "start_phase") -> Phase:
    every = phases(cfg)
    for phase in every:
        if phase.name == name:
            return phase
    raise UserError(f"{key}={name!r} is not one of phase_order's phases "
                    f"({', '.join(p.name for p in every) or 'none: phase_order is empty'})")


def segments(cfg) -> list:
    """[(first phase, steps)] of the learning-rate schedule: a new segment at the first
    phase and at every phase that sets a schedule key; one segment over the whole run
    without named phases."""
    every = phases(cfg)
    if not named(cfg):
        return [(every[0], cfg.total_steps)]
    starts = [p for i, p in enumerate(every)
              if i == 0 or any(c.startswith("optimizer.") for c in p.changes)]
    ends = [p.start for p in starts[1:]] + [cfg.total_steps]
    return [(p, end - p.start) for p, end in zip(starts, ends)]


def _order(cfg) -> list:
    names = [n.strip() for n in cfg.phase_order.split(",")]
    if "" in names or len(set(names)) != len(names):
        raise UserError(f"phase_order={cfg.phase_order!r} must name distinct phases, "
                        "comma-separated")
    stated = set(cfg.phases.keys())
    if set(names) != stated:
        missing, unused = sorted(set(names) - stated), sorted(stated - set(names))
        raise UserError(f"phase_order={cfg.phase_order!r} and the phases.* config differ: "
                        + "; ".join([f"no phases.{n} for {n}" for n in missing]
                                    + [f"phases.{n} is not in phase_order" for n in unused]))
    if "phase2" in cfg and cfg.phase2.fraction:
        raise UserError("phase2.fraction and phase_order are both set; state the phases one "
                        "way: set phase2.fraction=0 and give the second length as a phase")
    return names


def _allowed(key: str) -> bool:
    top, _, rest = key.partition(".")
    if not rest:
        return key in _TOP_KEYS or key in _LENGTH_KEYS
    if top == "data":
        return rest not in _FIXED_DATA_KEYS
    if top == "optimizer":
        return rest in SCHEDULE_KEYS
    return top == "model" and rest != "family"


def _apply(target, overrides, prefix: str, where: str) -> list:
    """Write `overrides` (a nested ConfigDict) into `target`; returns the dotted keys set."""
    done = []
    for key, value in overrides.items():
        name = f"{prefix}{key}"
        if value is None:  # a placeholder for the command line: carries over until set
            continue
        if isinstance(value, ml_collections.ConfigDict):
            if key not in target or not isinstance(target[key], ml_collections.ConfigDict):
                raise UserError(f"{where}{name} is not a group of this config's keys")
            done += _apply(target[key], value, name + ".", where)
            continue
        if not _allowed(name):
            raise UserError(
                f"{where}{name} cannot change between phases: a phase may set seq_len, "
                "global_batch_size, steps or tokens, the objective (one of the family's over "
                "the same parameters), data keys (not the tokenizer), model "
                "keys that keep the parameters' shapes, and the schedule's optimizer keys ("
                + ", ".join(SCHEDULE_KEYS) + ")")
        if name in _LENGTH_KEYS:
            continue
        if key not in target and not (prefix == "optimizer." and key in SCHEDULE_KEYS):
            raise UserError(f"{where}{name} is not a key of this config")
        try:
            target[key] = value
        except TypeError as e:
            raise UserError(f"{where}{name}={value!r}: {e}") from None
        done.append(name)
    return done


def _phase_steps(overrides, phase_cfg, where: str) -> int | None:
    steps, tokens = overrides.get("steps", 0), overrides.get("tokens", 0)
    if steps and tokens:
        raise UserError(f"{where}steps and {where}tokens are both set; give one")
    if tokens:
        return math.ceil(tokens / (phase_cfg.global_batch_size * phase_cfg.seq_len))
    return steps or None


def _named_phases(cfg) -> list:
    names = _order(cfg)
    out, start, current = [], 0, copy.deepcopy(cfg)
    current.unlock()
    for index, name in enumerate(names, start=1):
        where = f"phases.{name}."
        overrides = cfg.phases[name]
        if not isinstance(overrides, ml_collections.ConfigDict):
            raise UserError(f"phases.{name} must be a group of keys, got {overrides!r}")
        changes = _apply(current, overrides, "", where)
        steps = _phase_steps(overrides, current, where)
        last = index == len(names)
        if steps is None and not last:
            raise UserError(f"{where}steps (or tokens) is not set; every phase but the "
                            "last says how long it is")
        end = cfg.total_steps if steps is None else start + int(steps)
        if end <= start or end > cfg.total_steps or (last and end != cfg.total_steps):
            raise UserError(
                f"phase {name} would cover steps [{start}, {end}) of total_steps="
                f"{cfg.total_steps}: the phases' steps must fill the run in order (the "
                "last one may leave out steps and take the rest)")
        phase_cfg = copy.deepcopy(current)  # standing alone: one phase, no others
        phase_cfg.phase_order, phase_cfg.start_phase = "", ""
        phase_cfg.phases = ml_collections.ConfigDict()
        phase_cfg.lock()
        out.append(Phase(index, start, end, phase_cfg.seq_len, phase_cfg.global_batch_size,
                         phase_cfg.data.get("max_predictions_per_seq", 0), where, name=name,
                         cfg=phase_cfg, changes=changes))
        start = end
    return out


def check(cfg) -> None:
    """What named phases need of the run as a whole (each phase's own config passes the
    family's checks in objectives.validate): a schedule segment long enough for its
    warmup and decay, no wall-clock budget (phases count steps), a known start_phase
    that init_from feeds."""
    if cfg.optimizer.budget_hours:
        raise UserError("optimizer.budget_hours and phase_order are both set: phases are "
                        "counted in steps; give the run steps, not a wall-clock budget")
    for first, steps in segments(cfg):
        opt = first.cfg.optimizer
        if opt.warmup_steps > steps:
            raise UserError(f"phase {first.name}: optimizer.warmup_steps={opt.warmup_steps} "
                            f"is longer than its schedule segment ({steps} steps)")
        if opt.schedule == "warmup_stable_decay" and not 0 < opt.decay_steps <= \
                steps - opt.warmup_steps:
            raise UserError(f"phase {first.name}: optimizer.decay_steps={opt.decay_steps} must "
                            f"be in (0, {steps - opt.warmup_steps}], its schedule segment's "
                            "steps after warmup")
    if cfg.start_phase:
        by_name(cfg, cfg.start_phase)
        if not cfg.init_from:
            raise UserError(f"start_phase={cfg.start_phase!r} starts a later phase from "
                            "trained weights: set init_from (a workdir or HF directory)")
