"""A run as the CLI, notebooks and sweeps start it: `loop_for(cfg)` says which loop runs
a config (fine-tuning's for a fine-tuning config, this module for every objective's),
and this module's `train` is the pretraining loop with `init_from` (an HF directory, a
google-research checkpoint or another run's workdir) read through interop, which the
loop itself never imports."""

import dataclasses
import functools
import os
import sys

import jax

from pretrainx import interop, objectives
from pretrainx.errors import UserError
from pretrainx.finetune import config as finetune_config
from pretrainx.finetune import loop as finetune_loop
from pretrainx.train import loop
from pretrainx.train import metrics as metrics_lib
from pretrainx.train import optim

describe = loop.describe

# How a run computes, not what the model is: the recipe's, never the folder's.
RUNTIME_KEYS = ("dtype", "remat", "scan_layers", "float32_attention_logits", "attention_impl")


def loop_for(cfg):
    """The module whose `train(cfg, workdir)` and `describe(cfg)` run `cfg`: asked here
    by the CLI and the sweep runner, so that the choice is made in one place."""
    return finetune_loop if finetune_config.is_finetuning(cfg) else sys.modules[__name__]


def train(cfg, workdir: str, **kwargs) -> dict:
    """loop.train with init_from and the objective's imported models (a distillation's
    teacher) read through interop; the same keyword arguments. A staged recipe
    (objectives.Entry.stages) runs its stages in turn, each in its folder and started
    from the one before; a stage a signal stops ends the call (a rerun resumes it, the
    stages done doing nothing)."""
    stages = objectives.stages(cfg)
    if len(stages) == 1:  # its own config: a staged recipe's one stage is set for it
        return _train_one(stages[0][1], workdir, **kwargs)
    before, result = None, None
    for folder, stage_cfg in stages:
        where = os.path.join(workdir, folder) if folder else workdir
        if before is not None:
            with stage_cfg.unlocked():
                stage_cfg.init_from = before
        metrics_lib.log(f"stage {folder or 'last'}: {where}"
                        + (f", from {before}" if before else ""))
        result = _train_one(stage_cfg, where, **kwargs)
        if not result["complete"]:
            return result
        before = where
    return result


def _train_one(cfg, workdir: str, **kwargs) -> dict:
    init = None
    if cfg.init_from:  # its model keys and tokenizer first: then the checks see them
        pretrained = interop.load(cfg.init_from)
        cfg = with_model_of(cfg, pretrained)
        init = functools.partial(continue_from, pretrained)
    objectives.validate(cfg)
    optim.check(cfg)
    imported = imported_models(cfg) or None
    return loop.train(cfg, workdir, init=init, imported=imported,
                      built=objectives.for_run(cfg, imported), **kwargs)


def evaluate(cfg, workdir: str, **kwargs) -> dict:
    """loop.evaluate with the objective's imported models (a distilled run's teacher sits
    in its checkpoint beside the student) read through interop."""
    return loop.evaluate(cfg, workdir, imported=imported_models(cfg) or None, **kwargs)


def imported_models(cfg) -> dict:
    """{config key: Pretrained} of the models cfg's objective reads (a teacher)."""
    return {key: interop.load(path) for key, path in objectives.imports(cfg).items()}


def with_model_of(cfg, pretrained):
    """cfg with the model keys `pretrained` defines (shapes, activation, tied or untied
    output layer, positions), before anything is built. A key the recipe leaves at its
    objective's default takes the folder's value; one the recipe set otherwise contradicts
    the folder and is refused, naming both values. Runtime keys, and those the objective
    sets itself (Entry.own_model_keys: the decoder's causal attention), stay the
    recipe's. An empty data.tokenizer takes the folder's (and its lower-casing)."""
    if pretrained.family != cfg.model.family:
        raise UserError(f"init_from {cfg.init_from} is a {pretrained.family} model; this config "
                        f"trains {cfg.model.family}")
    defaults = objectives.default_config(cfg.objective).model  # where a recipe starts
    own = objectives.get(cfg.objective).own_model_keys
    cfg = cfg.copy_and_resolve_references()
    taken = []
    for key, value in pretrained.model.items():
        if key in RUNTIME_KEYS or key in own or key not in defaults or \
                cfg.model.get(key) == value:
            continue
        if key in cfg.model and cfg.model[key] != defaults[key]:
            raise UserError(f"model.{key}={cfg.model[key]!r} contradicts init_from "
                            f"{pretrained.source}, whose model has {key}={value!r}")
        with cfg.unlocked():
            cfg.model[key] = value
        taken.append(f"{key}={value}")
    if not cfg.data.tokenizer:
        with cfg.unlocked():
            cfg.data.tokenizer, cfg.data.lower_case = pretrained.tokenizer, pretrained.lower_case
        taken.append(f"data.tokenizer={pretrained.tokenizer}")
    if taken:
        metrics_lib.log(f"  keys from {pretrained.source}: {', '.join(taken)}")
    return cfg


def continue_from(pretrained, cfg, state, shardings):
    """The state with `pretrained`'s parameters (cfg.init_from; optimizer state stays
    fresh). A whole subtree the import lacks (the pretraining heads of an encoder-only
    BERT or ELECTRA discriminator) starts fresh; a tensor missing inside a subtree it
    has, or of another shape, is refused."""
    fresh = jax.device_get(state.params)
    if cfg.model.scan_layers:
        fresh = interop.unstack_layers(fresh)
    inverse = objectives.get(cfg.objective).from_pretrained
    if inverse is not None:  # the run keeps another tree than the export (ELECTRA's)
        pretrained = dataclasses.replace(pretrained,
                                         params=inverse(pretrained.params, fresh))
    params, taken, new = interop.graft(
        fresh, pretrained,
        may_be_missing=lambda path: path[0] not in pretrained.params)
    if not taken:  # nothing found its place: the run would start from random weights
        raise UserError(f"init_from {pretrained.source}: none of its tensors "
                        f"({', '.join(sorted(pretrained.params))}) is a parameter of this "
                        f"{cfg.objective} run ({', '.join(sorted(fresh))})")
    if cfg.model.scan_layers:
        params = interop.stack_layers(params, jax.device_get(state.params))
    metrics_lib.log(f"  initialised from {pretrained.source}: {taken} tensors"
                    + (f"; fresh: {', '.join(new)}" if new else ""))
    return state.replace(params=jax.device_put(params, shardings.params))
