"""The training loop: a run's steps, with hooks for metrics, eval, the phase switch,
checkpoints, preemption and profiling (train/hooks.py). Everything settled before
the first step is train/run.py's."""

import jax

from pretrainx import config as config_lib
from pretrainx import objectives, phasing, sharding
from pretrainx.train import budget as budget_lib
from pretrainx.train import downstream, hooks as hooks_lib
from pretrainx.train import metrics as metrics_lib
from pretrainx.train import optim, phases as phases_lib, ramp, state as state_lib
from pretrainx.train.run import Run


def describe(cfg) -> dict:
    """What a run would be, from shapes alone (jax.eval_shape: nothing is allocated)."""
    objectives.validate(cfg)
    optim.check(cfg)
    objective = objectives.build(cfg, tokenizer=None)
    mesh = sharding.make_mesh(cfg.mesh)
    every = config_lib.phases(cfg)
    phase = every[0]
    tx = optim.make_optimizer(cfg.optimizer, cfg.total_steps, getattr(objective, "frozen", ()),
                              cfg.optimizer.ema_decay)
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
        "phases": phases_lib.describe(cfg, every, lambda c: objectives.build(c, tokenizer=None)),
        "flops_per_token": objective.flops_per_token(phase),
        "flops_per_token_formula": objective.flops_formula,
        **({"flops_per_token_symbols": objective.flops_symbols(phase)}
           if hasattr(objective, "flops_symbols") else {}),
        **({"accumulate_to": cfg.optimizer.accumulate_to, "batch_ramp": cfg.optimizer.batch_ramp,
            "batch_ramp_shape": cfg.optimizer.batch_ramp_shape}
           if ramp.accumulating(cfg.optimizer) else {}),
        **objective.describe(phase),
    }


def train(cfg, workdir: str, devices=None, stop_at: int | None = None, on_step=None,
          init=None, imported=None, built=None) -> dict:
    """Train (or resume) to cfg.total_steps. Returns the last train and eval records,
    the step reached and `complete` (False when a signal or `stop_at` stopped it first).
    `devices` restricts the mesh (tests compare 1 device with 8); `stop_at` ends the
    run early at that step with a checkpoint, as a preemption would. `on_step(step,
    records)`, if given, is called after every step with the records logged at it
    (usually none): what drives a notebook's progress bar (pretrainx.compare.notebook).
    `init(cfg, state, shardings) -> state` reads cfg.init_from and `imported` holds the
    models the objective reads, `built` the run's (tokenizer, objective)
    (pretrainx.pretrain gives all three; Run builds the last when not given)."""
    run = Run(cfg, workdir, devices, stop_at, init, imported, built=built)
    try:
        metrics = hooks_lib.Metrics(run)  # W&B may refuse to start (no login)
    except BaseException:
        run.ckpt.close()
        run.lock.release()
        raise
    checkpoint = hooks_lib.Checkpoint()
    evaluate = hooks_lib.Evaluate(metrics, stop=checkpoint.stop_requested)
    profile = hooks_lib.Profile(run)
    probe = downstream.Probe(run, metrics) if downstream.enabled(cfg) else hooks_lib.Hook()
    budget = budget_lib.Budget(run) if budget_lib.enabled(cfg) else None
    # The order is the contract: the budget's clock first (its record is the step's);
    # metrics before evaluation (an eval line follows its step's line); a checkpoint due
    # at the step before evaluation (a kill during it loses nothing); the phase switch
    # after evaluation (the old phase's eval closes it) and before a phase's last save
    # (a resume starts in the new phase); the probe last, on a committed checkpoint.
    hooks = [*([budget] if budget else []), profile, metrics,
             hooks_lib.SaveBeforeEvaluation(checkpoint), evaluate,
             hooks_lib.PhaseSwitch(metrics), checkpoint, probe]
    run.end = budget.last_step(run) if budget else run.end  # a resumed run may be spent

    def clock(run):  # from the step, or from the budget's elapsed share
        return ramp.clock_at(cfg, run.step, budget.progress() if budget else None)

    def settle(run):
        if budget and budget.time_is_up(run):
            run.end = run.step  # the hooks below evaluate and save this last step
        run.finished = run.step == cfg.total_steps or (budget is not None and budget.spent)
    try:
        if cfg.init_from and not run.resumed and run.step < run.end:  # the imported model
            evaluate.now(run)
        run_steps(run, hooks, clock, settle, on_step)
    finally:
        _close(run, profile, checkpoint, probe, metrics)
    metrics_lib.log(_ending(run, cfg, checkpoint, budget))
    return {"train": metrics.last, "eval": evaluate.last, "params": run.n_params,
            "peak_flops_source": run.peak_source, "step": run.step,
            "complete": run.step >= cfg.total_steps or bool(budget and budget.spent)}


def run_steps(run, hooks, clock, settle=None, on_step=None) -> None:
    """The one loop every training runs, pretraining (`train` above) and fine-tuning
    (finetune/loop.py): from run.step to run.end, a batch, the hooks' before_step, one
    step at `clock(run)` = (the step the schedules read, steps an update averages),
    `settle(run)` (what the step decides before the hooks see it: a budget's end), the
    hooks' after_step in their order, `on_step(step, records)`; a hook that sets
    run.stopping ends it after that step."""
    while run.step < run.end:
        batch = run.next_batch()
        for hook in hooks:
            hook.before_step(run)
        step_metrics = run.train_step(batch, *clock(run))
        if settle is not None:
            settle(run)
        logged = [record for hook in hooks for record in hook.after_step(run, step_metrics)]
        if on_step is not None:
            on_step(run.step, logged)
        if run.stopping:
            break


def _close(run, profile, checkpoint, probe, metrics) -> None:
    """The run's resources, released whatever happened: the last save commits while the
    checkpoint hook's handler still turns a signal into "finish, then stop"."""
    profile.close()
    try:
        run.ckpt.close()  # waits for the last save to commit
    finally:
        checkpoint.close()
        probe.close()  # waits for the probes started (stops them if the run stopped early)
        metrics.close()
        run.lock.release()


def evaluate(cfg, workdir: str, devices=None, phase: str | None = None,
             imported=None) -> dict:
    """{"step", "eval", "sources"}: the newest checkpoint of `workdir` evaluated on cfg's
    eval sources (eval_steps batches of each, as a run evaluates), training nothing.
    What pretrainx.evaluate.heldout prints, e.g. for a merged checkpoint (pretrainx.trained.merge).
    `phase`: as that named phase evaluates (its length, model keys, eval data);
    `imported`: the models the objective reads (pretrainx.pretrain.evaluate loads them)."""
    if phase is not None:
        phasing.by_name(cfg, phase, key="--phase")  # before the workdir is locked
    run = Run(cfg, workdir, devices, imported=imported,
              train_data=False)  # no data position: any config's
    try:
        at = run.phase if phase is None else phasing.by_name(cfg, phase, key="--phase")
        overall, by_source = run.phases.evaluate(at, run.state.params, cfg.eval_steps)
    finally:
        run.ckpt.close()
        run.lock.release()
    return {"step": run.step, "eval": overall, "sources": by_source,
            **({"phase": phase} if phase else {})}


def _ending(run, cfg, checkpoint, budget) -> str:
    """The line that says how the run ended and what to do next."""
    if run.start > cfg.total_steps:
        return (f"nothing to do: the newest checkpoint ({run.start}) is past "
                f"total_steps={cfg.total_steps}; checkpoints in {run.ckpt.directory}")
    if run.step < run.end:
        return (f"stopped by {checkpoint.signal_name or 'a preemption notice'} at step "
                f"{run.step}/{cfg.total_steps}; checkpoint {run.step} saved in "
                f"{run.ckpt.directory}; run the same command to resume")
    if budget and budget.spent:
        return (f"done: the {cfg.optimizer.budget_hours:g}-hour budget was spent at "
                f"step {run.step}; checkpoints in {run.ckpt.directory}")
    return (f"{'done' if run.step >= cfg.total_steps else 'stopped'}: {run.step}/"
            f"{cfg.total_steps} steps; checkpoints in {run.ckpt.directory}")
