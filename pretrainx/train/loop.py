"""The training loop: phases, steps, eval, logging, checkpoints, resume."""

import json
import time

import jax
import numpy as np
from flax import linen as nn

from pretrainx import config as config_lib
from pretrainx import objectives, sharding
from pretrainx.data import pipeline, sources
from pretrainx.errors import UserError
from pretrainx.train import checkpoint as checkpoint_lib
from pretrainx.train import metrics as metrics_lib
from pretrainx.train import optim, preemption, profile as profile_lib
from pretrainx.train import state as state_lib, step as step_lib


def describe(cfg) -> dict:
    """What a run would be, from shapes alone (jax.eval_shape: nothing is allocated)."""
    config_lib.validate(cfg)
    objective = objectives.build(cfg, tokenizer=None)
    mesh = sharding.make_mesh(cfg.mesh)
    phase = config_lib.phases(cfg)[0]
    tx = optim.make_optimizer(cfg.optimizer, cfg.total_steps)
    abstract = state_lib.abstract_state(objective.model, tx, objective.example_batch(1, phase))
    return {
        "params": state_lib.count_params(abstract),
        "mesh": dict(mesh.shape),
        "devices": jax.device_count(),
        "processes": jax.process_count(),
        "global_batch_size": cfg.global_batch_size,
        "per_device_batch_size": cfg.global_batch_size / jax.device_count(),
        "seq_len": cfg.seq_len,
        "total_steps": cfg.total_steps,
        "phases": [{"steps": [p.start, p.end], "seq_len": p.seq_len,
                    "global_batch_size": p.global_batch_size} for p in config_lib.phases(cfg)],
        "flops_per_token": objective.flops_per_token(phase),
        "flops_per_token_formula": objective.flops_formula,
        **objective.describe(phase),
    }


def _check_batches(cfg, mesh, rules):
    dp = sharding.data_parallel_size(mesh, rules)
    for phase in config_lib.phases(cfg):
        for divisor, what in ((dp, f"the {dp} data-parallel devices"),
                              (jax.process_count(), f"{jax.process_count()} processes"),
                              (dp * cfg.micro_batches, f"{cfg.micro_batches} micro-batches "
                                                       f"x {dp} data-parallel devices")):
            if phase.global_batch_size % divisor:
                raise UserError(f"{phase.prefix}global_batch_size={phase.global_batch_size} "
                                f"does not divide over {what}")


# Model keys that change how the model runs but not its parameters.
_RUNTIME_MODEL_KEYS = ("dtype", "remat", "dropout_rate", "attention_dropout_rate",
                       "float32_attention_logits", "initializer_range")
# Keys a resumed run may change; it says so.
_RESUMABLE_CHANGES = ("global_batch_size", "micro_batches", "mesh.data", "mesh.fsdp",
                      "mesh.tensor")


def _model_fields_differ(saved: dict, cfg) -> list:
    saved_model = saved.get("model", {})
    return [f"model.{k}: checkpoint {saved_model[k]!r} vs config {v!r}"
            for k, v in cfg.model.items()
            if k not in _RUNTIME_MODEL_KEYS and k in saved_model and saved_model[k] != v]


def _resumable_changes(saved: dict, cfg) -> list:
    old, new = config_lib.flatten(saved), config_lib.flatten(cfg)
    return [f"{k} {old[k]} -> {new[k]}" for k in _RESUMABLE_CHANGES
            if k in old and old[k] != new[k]]


def _check_enough(examples, phase, files):
    if len(examples) < phase.global_batch_size:
        raise UserError(f"{files} yields only {len(examples)} examples at seq_len "
                        f"{phase.seq_len}, fewer than one global batch of "
                        f"{phase.global_batch_size}: too little text")


def train_dataset(cfg, objective, phase):
    """The grain dataset of a phase's training batches, as the run sees them."""
    return train_data(cfg, objective, phase)[0]


def train_data(cfg, objective, phase):
    """(dataset, signature): the signature (examples per source, weights) is saved
    with the data position, so a resume into other data is refused."""
    specs = sources.split_sources(cfg.data.train_files)
    weights = sources.source_weights(cfg.data.train_files, cfg.data.train_weights)
    transform = objective.transform(phase, train=True)
    seed = cfg.seed * 1000 + phase.index
    parts = []
    for spec in specs:
        parts.append(objective.examples(spec, phase, train=True))
        if len(specs) == 1:
            _check_enough(parts[-1], phase, spec)
        elif not len(parts[-1]):
            raise UserError(f"{spec} yields no examples at seq_len {phase.seq_len}: too little text")
    signature = {"examples": [len(p) for p in parts], "weights": weights}
    if len(specs) == 1:
        ds = pipeline.make_dataset(parts[0], transform, phase.global_batch_size, seed=seed)
    else:
        ds = pipeline.make_dataset(parts, transform, phase.global_batch_size, seed=seed,
                                   weights=weights)
    return ds, signature


class _Phases:
    """Per-phase datasets and compiled steps, built on first use."""

    def __init__(self, cfg, objective, mesh, rules, model, tx, shardings):
        self.cfg, self.objective, self.mesh, self.rules = cfg, objective, mesh, rules
        self.batch_sharding = sharding.batch_sharding(mesh, rules)
        self._train_ds, self._eval_ds, self._steps, self._evals = {}, {}, {}, {}
        schedule = optim.learning_rate_schedule(cfg.optimizer, cfg.total_steps)
        self._train_fn = step_lib.make_train_step(model, tx, objective, schedule, cfg.micro_batches)
        self._eval_fn = step_lib.make_eval_step(model, objective)
        self._shardings = shardings

    def _batch_shardings(self, phase):
        example = self.objective.example_batch(phase.global_batch_size, phase)
        return {k: self.batch_sharding for k in example}

    def train_iterator(self, phase):
        if phase.index not in self._train_ds:
            self._train_ds[phase.index] = train_data(self.cfg, self.objective, phase)
        dataset, signature = self._train_ds[phase.index]
        return pipeline.make_iterator(dataset, signature=signature,
                                      worker_processes=self.cfg.data.worker_processes)

    def eval_dataset(self, phase):
        """The phase's eval batches (built once), or None without eval files."""
        if not self.cfg.data.eval_files:
            return None
        if phase.index not in self._eval_ds:
            examples = [x for spec in sources.split_sources(self.cfg.data.eval_files)
                        for x in self.objective.examples(spec, phase, train=False)]
            _check_enough(examples, phase, self.cfg.data.eval_files)
            self._eval_ds[phase.index] = pipeline.make_dataset(
                examples, self.objective.transform(phase, train=False), phase.global_batch_size,
                seed=12345 + phase.index, shuffle=False)
        return self._eval_ds[phase.index]

    def eval_iterator(self, phase):
        dataset = self.eval_dataset(phase)
        return None if dataset is None else pipeline.make_iterator(dataset)

    def train_step(self, phase):
        if phase.index not in self._steps:
            self._steps[phase.index] = step_lib.compile_train_step(
                self._train_fn, self.mesh, self.rules, self._shardings,
                self._batch_shardings(phase))
        return self._steps[phase.index]

    def eval_step(self, phase):
        if phase.index not in self._evals:
            self._evals[phase.index] = step_lib.compile_eval_step(
                self._eval_fn, self.mesh, self.rules, self._shardings.params,
                self._batch_shardings(phase))
        return self._evals[phase.index]

    def to_global(self, local_batch):
        return {k: jax.make_array_from_process_local_data(self.batch_sharding, np.asarray(v))
                for k, v in local_batch.items()}


def _evaluate(phases, phase, params, objective, eval_steps):
    iterator = phases.eval_iterator(phase)
    if iterator is None:
        return None
    eval_step = phases.eval_step(phase)
    totals = None
    for _ in range(eval_steps):
        sums = jax.device_get(eval_step(params, phases.to_global(next(iterator))))
        totals = sums if totals is None else {k: totals[k] + sums[k] for k in totals}
    del iterator
    return objective.eval_metrics(totals)


def _continue_from(cfg, state, shardings):
    """The state with the parameters of cfg.init_from (optimizer state stays fresh).
    A BERT import without the pretraining heads (an encoder) gets fresh heads."""
    from pretrainx import interop
    pretrained = interop.load(cfg.init_from)
    if pretrained.family != cfg.model.family:
        raise UserError(f"init_from {cfg.init_from} is a {pretrained.family} model; this config "
                        f"trains {cfg.model.family}")
    fresh = jax.device_get(state.params)
    if cfg.model.scan_layers:
        fresh = interop.unstack_layers(fresh)
    params, taken, new = interop.graft(
        fresh, pretrained,
        may_be_missing=lambda path: cfg.model.family == "bert" and path[0] != "bert")
    if cfg.model.scan_layers:
        params = interop.stack_layers(params, jax.device_get(state.params))
    metrics_lib.log(f"  initialised from {pretrained.source}: {taken} tensors"
                    + (f"; fresh: {', '.join(new)}" if new else ""))
    return state.replace(params=jax.device_put(params, shardings.params))


def _summarise(buffer):
    """Average per-step metrics over the log interval, leaving out skipped steps
    (non-finite loss or gradient); learning rate: the last. Also returns which
    steps were skipped."""
    host = jax.device_get(buffer)
    skipped = [bool(m["skipped"]) for m in host]
    good = [m for m, s in zip(host, skipped) if not s] or host
    out = {k: float(np.mean([m[k] for m in good])) for k in host[0] if k != "skipped"}
    out["learning_rate"] = float(host[-1]["learning_rate"])
    out["skipped_steps"] = sum(skipped)
    return out, skipped


def train(cfg, workdir: str, devices=None, stop_at: int | None = None, on_step=None) -> dict:
    """Train (or resume) to cfg.total_steps. Returns the last train and eval records.

    `devices` restricts the mesh (tests compare 1 device with 8); `stop_at` ends the
    run early at that step with a checkpoint, as a preemption would. `on_step(step,
    records)`, if given, is called after every step with the records logged at it
    (usually none): what drives a notebook's progress bar (pretrainx.notebook).
    """
    config_lib.validate(cfg)
    config_lib.require_data(cfg)
    from pretrainx.data.tokenizers import load_tokenizer
    tokenizer = load_tokenizer(cfg.data.tokenizer, lower_case=cfg.data.lower_case)
    # ELMo reads any listed word by its characters; only its softmax is model.vocab_size
    if tokenizer.vocab_size > cfg.model.vocab_size and not getattr(
            tokenizer, "softmax_may_be_smaller", False):
        raise UserError(f"tokenizer {cfg.data.tokenizer} has {tokenizer.vocab_size} ids but "
                        f"model.vocab_size={cfg.model.vocab_size}")
    objective = objectives.build(cfg, tokenizer)
    mesh = sharding.make_mesh(cfg.mesh, devices)
    rules = sharding.rules_of(cfg)
    _check_batches(cfg, mesh, rules)
    from etils import epath  # local paths and gs:// alike
    try:
        epath.Path(workdir).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"workdir {workdir} is not writable: {e.strerror or e}") from None

    all_phases = config_lib.phases(cfg)
    tx = optim.make_optimizer(cfg.optimizer, cfg.total_steps)
    model = objective.model
    init_batch = objective.example_batch(1, all_phases[0])
    abstract = state_lib.abstract_state(model, tx, init_batch)
    n_params = state_lib.count_params(abstract)
    shardings = state_lib.state_shardings(abstract, mesh, rules)
    metrics_lib.log(f"pretrainx: {cfg.model.family} with {n_params:,} parameters "
                    f"({n_params / 1e6:.1f}M) on mesh {dict(mesh.shape)} of {jax.device_count()} "
                    f"{jax.devices()[0].platform} devices")
    for p in all_phases:
        metrics_lib.log(f"  phase {p.index}: steps [{p.start}, {p.end}) seq_len {p.seq_len} "
                        f"global batch {p.global_batch_size} "
                        f"({p.global_batch_size // jax.device_count()} per device)"
                        + "".join(f"; {k} {v}" for k, v in objective.describe(p).items()))

    # Measured before the input pipeline's threads start, so they do not skew it.
    peak, peak_source = metrics_lib.peak_flops_per_device()
    phases = _Phases(cfg, objective, mesh, rules, model, tx, shardings)
    ckpt = checkpoint_lib.Checkpointer(workdir, cfg.keep_checkpoints, cfg.checkpoint_every)

    def check_config(saved_cfg):
        differ = _model_fields_differ(saved_cfg, cfg)
        if differ:
            raise UserError(f"checkpoint in {ckpt.directory} was written for another model: "
                            + "; ".join(differ))

    restored = ckpt.restore(nn.unbox(abstract), shardings,
                            lambda s: phases.train_iterator(config_lib.phase_at(cfg, s)),
                            check_config)
    if restored is not None:
        start, state, iterator, saved_cfg = restored
        metrics_lib.log(f"resumed from {ckpt.directory}/{start}")
        changes = _resumable_changes(saved_cfg, cfg)
        if changes:
            metrics_lib.log("  changed since the checkpoint: " + "; ".join(changes)
                            + " (the data position counts batches of the new size)")
    else:
        start = 0
        state, _ = state_lib.create_state(model, tx, init_batch, cfg.seed, mesh, rules, shardings)
        if cfg.init_from:
            state = _continue_from(cfg, state, shardings)
        iterator = phases.train_iterator(config_lib.phase_at(cfg, 0))

    phases.eval_dataset(config_lib.phase_at(cfg, start))  # a bad eval corpus fails now
    # Written only once the run is sure to start: a refused run changes nothing.
    try:
        (epath.Path(workdir) / "config.json").write_text(cfg.to_json(sort_keys=True))
    except OSError as e:
        raise UserError(f"workdir {workdir} is not writable: {e.strerror or e}") from None
    writer = metrics_lib.MetricsWriter(workdir, cfg.total_steps)
    profiler = profile_lib.StepProfiler(workdir, start, cfg.profile_start_step, cfg.profile_steps)
    base_key = jax.random.key(cfg.seed + 1)
    phase = config_lib.phase_at(cfg, start)
    last_train, last_eval = None, None
    # Metrics of every step are logged; only steps after the first of a phase (which
    # compiles) count towards tokens/s, unless that step is all the interval has.
    buffer, interval_steps, interval_start = [], 0, time.perf_counter()
    fresh, seconds_per_step = True, float("nan")
    step = start
    end = cfg.total_steps if stop_at is None else min(stop_at, cfg.total_steps)
    skip_run = 0  # consecutive skipped (non-finite) steps
    stop = preemption.StopRequest().install()
    try:
        while step < end:
            logged = []
            batch = phases.to_global(next(iterator))
            profiler.before_step(step)
            state, step_metrics = phases.train_step(phase)(state, batch, base_key)
            step += 1
            profiler.after_step(step, step_metrics)
            buffer.append(step_metrics)
            interval_steps += 1
            if fresh:
                jax.block_until_ready(step_metrics)
                fresh = False
                if step % cfg.log_every:
                    interval_steps, interval_start = 0, time.perf_counter()
            if step % cfg.log_every == 0 or step == end:
                record, skipped = _summarise(buffer)
                for bad in skipped:
                    skip_run = skip_run + 1 if bad else 0
                if skip_run >= cfg.max_skipped_steps:
                    raise UserError(
                        f"loss or gradient not finite for {skip_run} consecutive steps up to "
                        f"step {step} (max_skipped_steps={cfg.max_skipped_steps}); the last "
                        f"good checkpoint is kept in {ckpt.directory}")
                elapsed = time.perf_counter() - interval_start
                seconds_per_step = elapsed / max(interval_steps, 1)
                tps = interval_steps * phase.global_batch_size * phase.seq_len / max(elapsed, 1e-9)
                record.update(step=step, tokens_per_sec=tps,
                              mfu=objective.flops_per_token(phase) * tps
                              / (peak * jax.device_count()),
                              seq_len=phase.seq_len, global_batch_size=phase.global_batch_size)
                writer.write(record)
                writer.progress(record, seconds_per_step)
                last_train = record
                logged.append(record)
                buffer, interval_steps, interval_start = [], 0, time.perf_counter()
            if step % cfg.eval_every == 0 or step == cfg.total_steps:
                result = _evaluate(phases, phase, state.params, objective, cfg.eval_steps)
                if result is not None:
                    last_eval = dict(result, step=step, split="eval")
                    writer.write(last_eval)
                    writer.progress(last_eval, seconds_per_step)
                    logged.append(last_eval)
                interval_steps, interval_start = 0, time.perf_counter()
            if step >= phase.end and step < cfg.total_steps:
                # Switch before saving so the saved iterator is the next phase's.
                phase = config_lib.phase_at(cfg, step)
                iterator, fresh = phases.train_iterator(phase), True
            preempted = bool(stop) or ckpt.reached_preemption(step)
            if step % cfg.checkpoint_every == 0 or step == end or preempted:
                ckpt.save(step, state, iterator, cfg.to_json(sort_keys=True),
                          force=step == end or preempted)
            if on_step is not None:
                on_step(step, logged)
            if preempted:
                break
    finally:
        stop.uninstall()
        profiler.close()
        ckpt.close()  # waits for the last save to commit
        writer.close()
    if step < end:
        metrics_lib.log(f"stopped by {stop.signal_name or 'a preemption notice'} at step "
                        f"{step}/{cfg.total_steps}; checkpoint {step} saved in "
                        f"{ckpt.directory}; run the same command to resume")
    else:
        metrics_lib.log(f"{'done' if step >= cfg.total_steps else 'stopped'}: {step}/"
                        f"{cfg.total_steps} steps; checkpoints in {ckpt.directory}")
    return {"train": last_train, "eval": last_eval, "params": n_params,
            "peak_flops_source": peak_source}
