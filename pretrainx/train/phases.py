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
            check_enough(parts[-1], phase, spec)
        elif not len(parts[-1]):
            raise UserError(f"{spec} yields no examples at seq_len {phase.seq_len}: too little text")
    signature = {"examples": [len(p) for p in parts], "weights": weights}
    if len(specs) == 1:
        ds = pipeline.make_dataset(parts[0], transform, phase.global_batch_size, seed=seed)
    else:
        ds = pipeline.make_dataset(parts, transform, phase.global_batch_size, seed=seed,
                                   weights=weights)
    return ds, signature


class Phases:
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
            check_enough(examples, phase, self.cfg.data.eval_files)
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

    def evaluate(self, phase, params, eval_steps: int):
        """The objective's eval metrics over `eval_steps` batches, or None without eval files."""
        iterator = self.eval_iterator(phase)
        if iterator is None:
            return None
        eval_step = self.eval_step(phase)
        totals = None
        for _ in range(eval_steps):
            sums = jax.device_get(eval_step(params, self.to_global(next(iterator))))
            totals = sums if totals is None else {k: totals[k] + sums[k] for k in totals}
        del iterator
        return self.objective.eval_metrics(totals)
