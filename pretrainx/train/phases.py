"""A run's phases (BERT's 128 -> 512 switch, the lifecycle's named phases: phasing.py)
as the loop sees them: each phase's objective, training and eval batches and compiled
steps, built on first use, and the run's learning rate across them."""

import jax
import numpy as np
import optax

from pretrainx import config as config_lib
from pretrainx import phasing, sharding
from pretrainx.data import pipeline, sources
from pretrainx.errors import UserError
from pretrainx.train import schedules, step as step_lib


def check_enough(examples, phase, files):
    if len(examples) < phase.global_batch_size:
        raise UserError(f"{files} yields only {len(examples)} examples at seq_len "
                        f"{phase.seq_len}, fewer than one global batch of "
                        f"{phase.global_batch_size}: too little text")


def train_dataset(cfg, objective, phase):
    """The grain dataset of a phase's training batches, as the run sees them."""
    return train_data(cfg, objective, phase)[0]


def train_data(cfg, objective, phase):
    """(dataset, signature): the signature (examples per source, weights, and the
    bytes and rows of Parquet and Arrow files) is saved with the data position, so a
    resume into other data is refused."""
    specs = sources.split_sources(cfg.data.train_files)
    transform = objective.transform(phase, train=True)
    seed = cfg.seed * 1000 + phase.index
    parts = []
    for spec in specs:
        parts.append(objective.examples(spec, phase, train=True))
        if len(specs) == 1:
            check_enough(parts[-1], phase, spec)
        elif not len(parts[-1]):
            raise UserError(f"{spec} yields no examples at seq_len {phase.seq_len}: too little text")
    weights = mixing_weights(cfg, objective, specs)
    signature = {"examples": [len(p) for p in parts], "weights": weights}
    files = [] if cfg.data.prepared_dir else [sources.fingerprint(spec) for spec in specs]
    if any(files):  # Parquet and Arrow: a changed file may keep its examples' count
        signature["files"] = files
    if len(specs) == 1:
        ds = pipeline.make_dataset(parts[0], transform, phase.global_batch_size, seed=seed)
    else:
        ds = pipeline.make_dataset(parts, transform, phase.global_batch_size, seed=seed,
                                   weights=weights)
    return ds, signature


def mixing_weights(cfg, objective, specs):
    """The train sources' sampling probabilities: data.train_weights, or temperature
    sampling over their token counts (data.mixing_alpha), or equal."""
    data = cfg.data
    sizes = None
    if data.mixing_alpha and not data.train_weights and len(specs) > 1:
        sizes = [objective.corpus.tokens(spec) for spec in specs]
    return sources.source_weights(data.train_files, data.train_weights, data.mixing_alpha, sizes)


def learning_rate(cfg):
    """Step -> learning rate over the whole run: one schedule over total_steps, or with
    named phases one segment a schedule-changing phase starts (phasing.segments), each
    counted from its first step by that phase's optimizer keys."""
    parts = phasing.segments(cfg)
    if not phasing.named(cfg):
        return schedules.learning_rate_schedule(cfg.optimizer, cfg.total_steps)
    segments = [schedules.learning_rate_schedule(first.cfg.optimizer, steps)
                for first, steps in parts]
    if len(segments) == 1:
        return segments[0]
    return optax.join_schedules(segments, [first.start for first, _ in parts[1:]])


def sets(phase) -> dict:
    """{dotted key: value} of what a named phase sets ({} for the others)."""
    flat = config_lib.flatten(phase.cfg) if phase.changes else {}
    return {k: flat[k] for k in phase.changes}


def describe(cfg, every, build) -> list:
    """One row a phase for --describe: its steps and tokens, length and batch, the
    schedule segment it is in, its data mix and masking rate, FLOPs a token (of the
    objective `build(phase cfg)` makes) and what a named phase sets; `every`: the run's
    phases (config.phases)."""
    rows, segment = [], None
    starts = {first.index: steps for first, steps in phasing.segments(cfg)}
    for p in every:
        c = p.cfg or cfg
        if p.index in starts:
            o = c.optimizer
            segment = (f"{o.schedule} from step {p.start:,} over {starts[p.index]:,} steps, "
                       f"peak {o.learning_rate:g}, warmup {o.warmup_steps:,}"
                       + (f", decay {o.decay_steps:,}" if o.schedule == "warmup_stable_decay"
                          else ""))
        objective = build(c) if p.cfg is not None and p.cfg is not cfg else None
        row = {"name": p.label, "steps": [p.start, p.end],
               "tokens": (p.end - p.start) * p.global_batch_size * p.seq_len,
               "seq_len": p.seq_len, "global_batch_size": p.global_batch_size,
               "learning_rate": segment,
               "mix": {"train_files": c.data.train_files, "train_weights": c.data.train_weights,
                       "mixing_alpha": c.data.mixing_alpha},
               **({"mask_prob": c.data.mask_prob} if "mask_prob" in c.data else {})}
        if objective is not None:
            row["flops_per_token"] = objective.flops_per_token(p)
        if p.changes:
            row["sets"] = sets(p)
        rows.append(row)
    return rows


def table(rows) -> str:
    """describe()'s rows as the text table --describe prints beside its JSON."""
    head = ("phase", "steps", "tokens", "seq_len", "batch", "mask", "learning rate", "sets")
    body = [(r["name"], f"{r['steps'][0]:,}-{r['steps'][1]:,}", f"{r['tokens']:.3g}",
             str(r["seq_len"]), str(r["global_batch_size"]), str(r.get("mask_prob", "-")),
             r["learning_rate"] or "(as above)",
             ", ".join(f"{k}={v}" for k, v in r.get("sets", {}).items()
                       if not k.startswith("optimizer."))) for r in rows]
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    return "\n".join("  ".join(x[i].ljust(widths[i]) for i in range(len(head))).rstrip()
                     for x in [head, *body])


def eval_sources(cfg) -> list:
    """[(name, spec)] of the eval sets: the held-out part of each train source
    (data.eval_split_percent), else data.eval_files' sources; [] without either."""
    data = cfg.data
    if data.eval_split_percent:
        return list(zip(sources.source_names(data.train_files, data.train_source_names),
                        sources.split_sources(data.train_files)))
    if not data.eval_files:
        return []
    return list(zip(sources.source_names(data.eval_files, key="data.eval_files"),
                    sources.split_sources(data.eval_files)))


def _eval_seed(phase) -> int:
    """The eval masks' seed: a named phase's by its length, so that phases of one length
    (an extension and its decay) evaluate the same masked rows and compare."""
    return 12345 + (phase.seq_len if phase.name else phase.index)


class Phases:
    """Per-phase objectives, datasets and compiled steps, built on first use. A phase
    with a config of its own (a named phase) gets its own objective, built from it by
    `build(cfg)`: its model reads the phase's RoPE bases, its batches the phase's mix
    and masking rate."""

    def __init__(self, cfg, every, objective, mesh, rules, tx, shardings, schedule, build=None,
                 zero=None):
        self.cfg, self.objective, self.mesh, self.rules = cfg, objective, mesh, rules
        self.all = every  # the run's phases (phasing.phases), computed once by its Run
        self.batch_sharding = sharding.batch_sharding(mesh, rules)
        self._train_ds, self._eval_ds, self._steps, self._evals = {}, {}, {}, {}
        self._eval_batches = {}  # (phase index, source): whole batches in one pass
        self._objectives, self._fns = {}, {}
        self._build, self._tx, self._shardings, self._zero = build, tx, shardings, zero
        self.schedule = schedule  # learning_rate(cfg), which tx follows too

    def at(self, step: int):
        """The phase that trains `step`."""
        return phasing.at(self.all, step)

    def objective_of(self, phase):
        """The objective that trains `phase`: the run's, or one built from its config."""
        if phase.cfg is None or phase.cfg is self.cfg or self._build is None:
            return self.objective
        if phase.index not in self._objectives:
            self._objectives[phase.index] = self._build(phase.cfg)
        return self._objectives[phase.index]

    def _step_fns(self, phase):
        """(train fn, eval fn) of the phase's objective (one pair for the run's)."""
        objective = self.objective_of(phase)
        key = id(objective)
        if key not in self._fns:
            self._fns[key] = (
                step_lib.make_train_step(objective.model, self._tx, objective, self.schedule,
                                         self.cfg.micro_batches, self._zero),
                step_lib.make_eval_step(objective.model, objective))
        return self._fns[key]

    def _batch_shardings(self, phase):
        example = self.objective_of(phase).example_batch(phase.global_batch_size, phase)
        return {k: self.batch_sharding for k in example}

    def train_iterator(self, phase, step: int | None = None):
        """The phase's data from its start, or for a run at `step` of it (which a
        checkpoint's position then restores): it prefetches no further than the phase."""
        if phase.index not in self._train_ds:
            self._train_ds[phase.index] = train_data(phase.cfg or self.cfg,
                                                     self.objective_of(phase), phase)
        dataset, signature = self._train_ds[phase.index]
        left = phase.end - (phase.start if step is None else step)
        return pipeline.make_iterator(dataset, signature=signature, batches=left,
                                      worker_processes=self.cfg.data.worker_processes)

    def eval_datasets(self, phase):
        """{source name: the phase's eval batches} (built once); {} without eval data.
        One source keeps one dataset of all its examples."""
        if phase.index not in self._eval_ds:
            datasets, objective = {}, self.objective_of(phase)
            for name, spec in eval_sources(phase.cfg or self.cfg):
                examples = objective.examples(spec, phase, train=False)
                check_enough(examples, phase, spec)
                self._eval_batches[phase.index, name] = max(
                    1, len(examples) // phase.global_batch_size)
                datasets[name] = pipeline.make_dataset(
                    examples, objective.transform(phase, train=False),
                    phase.global_batch_size, seed=_eval_seed(phase), shuffle=False)
            self._eval_ds[phase.index] = datasets
        return self._eval_ds[phase.index]

    def train_step(self, phase):
        if phase.index not in self._steps:
            self._steps[phase.index] = step_lib.compile_train_step(
                self._step_fns(phase)[0], self.mesh, self.rules, self._shardings,
                self._batch_shardings(phase))
        return self._steps[phase.index]

    def eval_step(self, phase):
        if phase.index not in self._evals:
            self._evals[phase.index] = step_lib.compile_eval_step(
                self._step_fns(phase)[1], self.mesh, self.rules, self._shardings.params,
                self._batch_shardings(phase))
        return self._evals[phase.index]

    def to_global(self, local_batch):
        return {k: jax.make_array_from_process_local_data(self.batch_sharding, np.asarray(v))
                for k, v in local_batch.items()}

    def evaluate(self, phase, params, eval_steps: int, stop=lambda: False):
        """(metrics, {source: metrics}) over `eval_steps` batches of each eval source, or
        all of its whole batches where it has fewer (the
        first over all of them; the second empty with one source), or (None, {}): also
        when `stop()` turns true between batches (a preemption notice must not wait for
        a long evaluation)."""
        datasets = self.eval_datasets(phase)
        if not datasets:
            return None, {}
        eval_step = self.eval_step(phase)
        sums = {}
        for name, dataset in datasets.items():
            # one pass at most: more would count examples twice (it cycled for ever)
            batches = min(eval_steps, self._eval_batches[phase.index, name])
            iterator = pipeline.make_iterator(dataset[:batches], batches=batches)
            for _ in range(batches):
                if stop():
                    del iterator
                    return None, {}
                got = jax.device_get(eval_step(params, self.to_global(next(iterator))))
                sums[name] = got if name not in sums else {
                    k: sums[name][k] + got[k] for k in got}
            del iterator
        overall = None
        for totals in sums.values():
            overall = totals if overall is None else {k: overall[k] + totals[k] for k in overall}
        objective = self.objective_of(phase)
        by_source = ({} if len(sums) == 1 else
                     {name: objective.eval_metrics(totals) for name, totals in sums.items()})
        return objective.eval_metrics(overall), by_source
