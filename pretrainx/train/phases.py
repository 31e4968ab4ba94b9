"""A run's phases (BERT's 128 -> 512 switch) as the loop sees them: each phase's
training and eval batches and its compiled steps, built on first use."""

import jax
import numpy as np

from pretrainx import sharding
from pretrainx.data import pipeline, sources
from pretrainx.errors import UserError
from pretrainx.train import optim, step as step_lib


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


class Phases:
    """Per-phase datasets and compiled steps, built on first use."""

    def __init__(self, cfg, objective, mesh, rules, model, tx, shardings):
        self.cfg, self.objective, self.mesh, self.rules = cfg, objective, mesh, rules
        self.batch_sharding = sharding.batch_sharding(mesh, rules)
        self._train_ds, self._eval_ds, self._steps, self._evals = {}, {}, {}, {}
        self._eval_batches = {}  # (phase index, source): whole batches in one pass
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

    def eval_datasets(self, phase):
        """{source name: the phase's eval batches} (built once); {} without eval data.
        One source keeps one dataset of all its examples."""
        if phase.index not in self._eval_ds:
            datasets = {}
            for name, spec in eval_sources(self.cfg):
                examples = self.objective.examples(spec, phase, train=False)
                check_enough(examples, phase, spec)
                self._eval_batches[phase.index, name] = max(
                    1, len(examples) // phase.global_batch_size)
                datasets[name] = pipeline.make_dataset(
                    examples, self.objective.transform(phase, train=False),
                    phase.global_batch_size, seed=12345 + phase.index, shuffle=False)
            self._eval_ds[phase.index] = datasets
        return self._eval_ds[phase.index]

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
            iterator = pipeline.make_iterator(dataset)
            # one pass at most: more would count examples twice (it cycled for ever)
            for _ in range(min(eval_steps, self._eval_batches[phase.index, name])):
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
        by_source = ({} if len(sums) == 1 else
                     {name: self.objective.eval_metrics(totals) for name, totals in sums.items()})
        return self.objective.eval_metrics(overall), by_source
