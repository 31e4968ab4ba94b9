"""Everything a run settles before its first step: config checks, tokenizer and
objective, mesh, optimizer, the state (restored, imported or fresh) and the data
position. A refused run changes nothing in its workdir."""

import functools
import json
import time

import jax
from etils import epath  # local paths and gs:// alike
from flax import linen as nn

from pretrainx import config as config_lib
from pretrainx import objectives, phasing, sharding
from pretrainx.errors import UserError
from pretrainx.train import checkpoint as checkpoint_lib
from pretrainx.train import metrics as metrics_lib
from pretrainx.train import optim, ramp, state as state_lib, step as step_lib
from pretrainx.train import phases as phases_lib
from pretrainx.train.phases import Phases
from pretrainx.train.workdir_lock import WorkdirLock

# Model keys that change how the model runs but not its parameters.
_RUNTIME_MODEL_KEYS = ("dtype", "remat", "dropout_rate", "attention_dropout_rate",
                       "float32_attention_logits", "initializer_range")
# Keys a resumed run may change; it says so.
_RESUMABLE_CHANGES = ("total_steps", "global_batch_size", "micro_batches", "mesh.data",
                      "mesh.fsdp", "mesh.tensor", "mesh.dcn_data", "mesh.dcn_fsdp",
                      "mesh.shard_optimizer")


def _check_batches(cfg, every, mesh, rules):
    dp = sharding.data_parallel_size(mesh, rules)
    for phase in every:
        for divisor, what in ((dp, f"the {dp} data-parallel devices"),
                              (jax.process_count(), f"{jax.process_count()} processes"),
                              (dp * cfg.micro_batches, f"{cfg.micro_batches} micro-batches "
                                                       f"x {dp} data-parallel devices")):
            if phase.global_batch_size % divisor:
                raise UserError(f"{phase.prefix}global_batch_size={phase.global_batch_size} "
                                f"does not divide over {what}")


def _model_fields_differ(saved: dict, cfg) -> list:
    saved_model = saved.get("model", {})
    return [f"model.{k}: checkpoint {saved_model[k]!r} vs config {v!r}"
            for k, v in cfg.model.items()
            if k not in _RUNTIME_MODEL_KEYS and k in saved_model and saved_model[k] != v]


def _resumable_changes(saved: dict, cfg) -> list:
    old, new = config_lib.flatten(saved), config_lib.flatten(cfg)
    return [f"{k} {old[k]} -> {new[k]}" for k in _RESUMABLE_CHANGES
            if k in old and old[k] != new[k]]


def _layout_changes(saved: dict | None, now: dict) -> list:
    """Processes, slices, devices, data-parallel size and mesh that differ from the
    checkpoint's run (sharding.layout)."""
    if not saved:
        return []
    return [f"{k.replace('_', '-')} {saved[k]} -> {now[k]}" for k in now
            if k in saved and saved[k] != now[k]]


def _writable(workdir: str, write) -> None:
    try:
        write()
    except OSError as e:
        raise UserError(f"workdir {workdir} is not writable: {e.strerror or e}") from None


# (the run's shape keys, a phase's) whose parameters were traced and found the same
# shapes: a process evaluating or branching one multi-phase run builds many Runs of it
# (benchmarks/mmbert_languages.py traced its model's init 30 times for this check alone).
_SAME_SHAPES: set = set()


def _shape_key(cfg) -> str:
    """What a model's parameter shapes follow from: its model and objective keys."""
    flat = config_lib.flatten(cfg)
    return json.dumps(sorted((k, v) for k, v in flat.items()
                             if k.startswith(("model.", "objective"))), default=str)


def _check_phase_shapes(cfg, phases, abstract) -> None:
    """A named phase's model keys must keep every parameter's shape (one state trains
    through all phases)."""
    want = jax.tree_util.tree_map(lambda x: (x.shape, x.dtype), nn.unbox(abstract.params))
    run_key = _shape_key(cfg)
    for phase in phases.all:
        if not any(c.startswith("model.") or c == "objective" for c in phase.changes):
            continue
        key = (run_key, _shape_key(phase.cfg))
        if key in _SAME_SHAPES:
            continue
        objective = phases.objective_of(phase)
        got = state_lib.abstract_params(objective.model, objective.example_batch(1, phase))
        if jax.tree_util.tree_map(lambda x: (x.shape, x.dtype), nn.unbox(got)) != want:
            if "objective" in phase.changes and jax.tree_util.tree_structure(
                    nn.unbox(got)) != jax.tree_util.tree_structure(want):
                raise UserError(f"phase {phase.name}: objective {phase.cfg.objective} trains "
                                f"other parameters than {cfg.objective} (its model's tree "
                                "differs); a phase switches only among objectives over the "
                                "same parameters")
            keys = ", ".join(c for c in phase.changes if c.startswith("model."))
            raise UserError(f"phase {phase.name}: {keys} changes the parameters' shapes; a "
                            "phase may change only model keys that keep them (RoPE bases, "
                            "windows, dropout)")
        _SAME_SHAPES.add(key)


class Run:
    """A run's settled parts and where it stands (`step`, `state`, `iterator`, `phase`).

    `init(cfg, state, shardings) -> state` starts a fresh run from other weights
    (cfg.init_from); pretrainx.pretrain passes the one that reads them through interop.
    `imported` holds the models the objective reads (objectives.imports: a teacher),
    loaded by pretrainx.pretrain too, as is `built`: the (tokenizer, objective) of
    objectives.for_run (built here when not given). `train_data=False` (an evaluation)
    reads no train data and leaves a checkpoint's data position and the workdir's
    config.json, so it evaluates under any config.
    """

    def __init__(self, cfg, workdir: str, devices=None, stop_at=None, init=None,
                 imported=None, train_data: bool = True, built=None):
        objectives.validate(cfg)
        optim.check(cfg)
        wanted = objectives.imports(cfg)
        if wanted and not imported:
            raise UserError(f"{', '.join(wanted)} is read by pretrainx.pretrain.train (or "
                            "python -m pretrainx.main); this call gave no imported models")
        self.tokenizer, self.objective = built or objectives.for_run(cfg, imported)
        self.cfg, self.workdir = cfg, workdir
        self.mesh = mesh = sharding.make_mesh(cfg.mesh, devices)
        rules = sharding.rules_of(cfg)
        self.every = config_lib.phases(cfg)  # once: the checks, the state and Phases read it
        _check_batches(cfg, self.every, mesh, rules)
        self.layout = sharding.layout(mesh, rules, cfg.mesh)
        _writable(workdir, lambda: epath.Path(workdir).mkdir(parents=True, exist_ok=True))
        self.lock = WorkdirLock(workdir)
        if jax.process_index() == 0:
            self.lock.acquire()
        try:
            self._settle(rules, stop_at, init, imported, train_data)
        except BaseException:
            if getattr(self, "ckpt", None) is not None:
                self.ckpt.let_go()
            self.lock.release(refused=True)
            raise

    def _settle(self, rules, stop_at, init, imported, train_data):
        """The rest of __init__, under the workdir's lock."""
        cfg, workdir, objective, mesh = self.cfg, self.workdir, self.objective, self.mesh
        schedule = phases_lib.learning_rate(cfg)
        tx = optim.make_optimizer(cfg.optimizer, cfg.total_steps, getattr(objective, "frozen", ()),
                                  cfg.optimizer.ema_decay, schedule)
        every = self.every
        init_batch = objective.example_batch(1, every[0])
        abstract = state_lib.abstract_state(objective.model, tx, init_batch)
        self.n_params = state_lib.count_params(abstract)
        zero = cfg.mesh.shard_optimizer
        shardings = state_lib.state_shardings(abstract, mesh, rules, zero)
        build = functools.partial(objectives.build, tokenizer=self.tokenizer, imported=imported)
        self.phases = Phases(cfg, every, objective, mesh, rules, tx, shardings, schedule, build,
                             state_lib.zero_of(abstract, shardings, mesh, rules, zero))
        _check_phase_shapes(cfg, self.phases, abstract)
        self._log_start(state_lib.count_frozen(abstract, getattr(objective, "frozen", ())))
        # Measured before the input pipeline's threads start, so they do not skew it.
        self.peak, self.peak_source = metrics_lib.peak_flops_per_device()
        self.ckpt = checkpoint_lib.Checkpointer(workdir, cfg.keep_checkpoints,
                                                cfg.checkpoint_every)
        restored = self.ckpt.restore(
            nn.unbox(abstract), shardings,
            lambda s: self._data_at(s, train_data), self._check_saved)
        self.resumed = restored is not None
        if restored is not None:
            self.step, self.state, self.iterator, saved_cfg, saved_layout = restored
            self._log_resume(saved_cfg, saved_layout)
        else:
            self.step = 0
            self.state, _ = state_lib.create_state(objective.model, tx, init_batch, cfg.seed,
                                                   mesh, rules, shardings)
            if imported:  # the objective places what it imported (a teacher, its student)
                params = objective.adopt(jax.device_get(self.state.params), imported)
                self.state = self.state.replace(params=jax.device_put(params, shardings.params))
            if cfg.init_from:
                if init is None:
                    raise UserError("init_from is read by pretrainx.pretrain.train (or "
                                    "python -m pretrainx.main); this call gave no init hook")
                self.state = init(cfg, self.state, shardings)
            if cfg.start_phase:  # a later phase from trained weights, its optimizer fresh
                self.step = phasing.by_name(cfg, cfg.start_phase).start
                metrics_lib.log(f"  starting at phase {cfg.start_phase} (step {self.step}) "
                                f"from {cfg.init_from}: a fresh optimizer state, the "
                                "schedule and data at that phase")
            self.iterator = self._data_at(self.step, train_data)
        self.phase = self.phases.at(self.step)
        self.phases.eval_datasets(self.phase)  # a bad eval corpus fails now
        # Written only once the run is sure to start: a refused run changes nothing, nor
        # does one whose checkpoint is already past total_steps (nothing to train), nor an
        # evaluation (its config, other eval sources or another objective, is not the run's).
        if train_data and self.step <= cfg.total_steps:
            _writable(workdir, lambda: (epath.Path(workdir) / "config.json").write_text(
                cfg.to_json(sort_keys=True)))
        self.start = self.step
        self.end = cfg.total_steps if stop_at is None else min(stop_at, cfg.total_steps)
        self.key = jax.random.key(cfg.seed + 1)
        self.replicated = sharding.replicated(mesh)
        self.stopping = False  # set by a hook: save and leave the loop after this step
        self.finished = False  # set by the loop: this step ends the run (total_steps or budget)

    def _log_start(self, frozen: int):
        """The run's first lines; `frozen`: of its parameters, those it never trains."""
        cfg, mesh = self.cfg, self.mesh
        metrics_lib.log(f"pretrainx: {cfg.model.family} with {self.n_params:,} parameters "
                        f"({self.n_params / 1e6:.1f}M"
                        + (f", {frozen:,} of them frozen" if frozen else "")
                        + f") on mesh {dict(mesh.shape)} of "
                        f"{jax.device_count()} {jax.devices()[0].platform} devices")
        for p in self.phases.all:
            changes = ", ".join(f"{k}={v}" for k, v in phases_lib.sets(p).items())
            metrics_lib.log(f"  phase {p.index}{' ' + p.name if p.name else ''}: steps "
                            f"[{p.start}, {p.end}) seq_len {p.seq_len} "
                            f"global batch {p.global_batch_size} "
                            f"({p.global_batch_size // jax.device_count()} per device)"
                            + "".join(f"; {k} {v}" for k, v in
                                      self.phases.objective_of(p).describe(p).items())
                            + (f"; sets {changes}" if changes else ""))
        o = cfg.optimizer
        if ramp.accumulating(o):
            clock = "budget's time" if o.budget_hours else "steps"
            metrics_lib.log("  updates: a step is a micro-batch; an update averages "
                            + (f"1 -> {o.accumulate_to} of them ({o.batch_ramp_shape}) over the "
                               f"first {o.batch_ramp:.1%} of the {clock}" if o.batch_ramp
                               else f"{o.accumulate_to} of them"))

    def checkpoint_due(self) -> bool:
        """Every checkpoint_every steps, at the run's end and at a named phase's end."""
        return (self.step % self.cfg.checkpoint_every == 0 or self.step == self.end
                or bool(self.phase.name) and self.step == self.phase.start)

    def save_checkpoint(self, force: bool) -> None:
        """The state, the data position (with the layout and the phase it is of) and
        the config, at this step."""
        self.ckpt.save(self.step, self.state, self.iterator, self.cfg.to_json(sort_keys=True),
                       force=force, layout=self.layout, phase=self.phase.name)

    def _check_saved(self, saved_cfg):
        differ = _model_fields_differ(saved_cfg, self.cfg)
        if differ:
            raise UserError(f"checkpoint in {self.ckpt.directory} was written for another "
                            "model: " + "; ".join(differ))
        saved_ema = saved_cfg.get("optimizer", {}).get("ema_decay", 0.0)  # older: none
        if bool(saved_ema) != bool(self.cfg.optimizer.ema_decay):
            raise UserError(f"checkpoint in {self.ckpt.directory} was written with "
                            f"optimizer.ema_decay={saved_ema}, this config has "
                            f"{self.cfg.optimizer.ema_decay}: its optimizer state "
                            f"{'holds' if saved_ema else 'lacks'} the parameter average; keep "
                            "the average on (or off) as the run started")

    def _log_resume(self, saved_cfg, saved_layout):
        metrics_lib.log(f"resumed from {self.ckpt.directory}/{self.step}")
        changes = _resumable_changes(saved_cfg, self.cfg) + _layout_changes(saved_layout,
                                                                            self.layout)
        if self.step > self.cfg.total_steps:
            metrics_lib.log(f"  the checkpoint is at step {self.step}, past total_steps="
                            f"{self.cfg.total_steps}: nothing to train (config.json left as "
                            "it was); raise total_steps to continue")
        elif any(c.startswith("total_steps") for c in changes):
            changes.append("the learning-rate schedule now runs to the new total_steps")
        if changes:
            batch_changed = any(c.startswith("global_batch_size") for c in changes)
            metrics_lib.log("  changed since the checkpoint: " + "; ".join(changes) + (
                " (the data position counts batches of the new size)" if batch_changed else
                " (the data position counts global batches: the same examples follow)"))

    def _data_at(self, step: int, train_data: bool):
        """The train iterator for a run at `step` (None for a run without train data)."""
        return (self.phases.train_iterator(self.phases.at(step), step)
                if train_data else None)

    # seconds the loop has waited on the input pipeline (next_batch), for the logs
    input_wait_s = 0.0

    def next_batch(self):
        """The next global batch. The time the host waits here for the pipeline adds to
        `input_wait_s`: a run starved of data shows it in its log (`input_wait`) rather
        than only as a low tokens/s."""
        began = time.perf_counter()
        batch = next(self.iterator)
        self.input_wait_s += time.perf_counter() - began
        return self.phases.to_global(batch)

    def train_step(self, batch, schedule_step: int, every: int = 1):
        """One step; the schedules read `schedule_step` and an update averages `every`
        steps (ramp.clock_at computes both on the host)."""
        clock = step_lib.clock(schedule_step, every, self.replicated)
        self.state, metrics = self.phases.train_step(self.phase)(self.state, batch, self.key,
                                                                 clock)
        self.step += 1
        return metrics
