"""Objectives by config key `objective`, each held by its family's entry.

A family's spec.py (pretrainx/families/<name>/) lists its objectives' `Entry`s
(contract.py) in the one `Family` it registers; the first lookup imports every
family, so adding an objective edits no table here. This package holds what
objectives share.
"""

import ml_collections

from pretrainx import config as config_lib
from pretrainx.data import formats, sources, tokenizers
from pretrainx.errors import UserError
from pretrainx.models import attention
from pretrainx.objectives.contract import MNTP_SUFFIX, Entry  # noqa: F401  (a spec lists)
from pretrainx import phasing, registry

OBJECTIVES = registry.View("objective", registry.FAMILIES, "objectives")


def get(name: str) -> Entry:
    entry = OBJECTIVES.find(name)
    family = name[:-len(MNTP_SUFFIX)] if name.endswith(MNTP_SUFFIX) else ""
    if entry is None and registry.FAMILIES.find(family):
        having = [e.name for e in OBJECTIVES.entries() if e.name.endswith(MNTP_SUFFIX)]
        raise UserError(f"objective {name!r}: {family} has no causal form, and MNTP predicts "
                        "a masked token from the output before it, a decoder's next-token "
                        f"head; MNTP objectives: {', '.join(having)}")
    return OBJECTIVES.get(name, "objective")


def build(cfg, tokenizer, imported: dict | None = None):
    """The objective of `cfg` (tokenizer None: shapes only, as --describe needs);
    `imported`: the models its entry's `imports` names, loaded (pretrainx.pretrain)."""
    entry = get(cfg.objective)
    return entry.build(cfg, tokenizer, imported) if imported else entry.build(cfg, tokenizer)


def for_run(cfg, imported: dict | None = None) -> tuple:
    """(tokenizer, objective) that a run of `cfg` trains: its data and vocabulary
    required, the tokenizer loaded and checked against model.vocab_size, the objective
    built. pretrainx.pretrain calls it and hands both to the loop, so a key reaches the
    code that reads it through the entry point, this package and the family."""
    config_lib.require_data(cfg)
    tokenizer = load_tokenizer(cfg)
    # ELMo reads any listed word by its characters; only its softmax is model.vocab_size
    if tokenizer.vocab_size > cfg.model.vocab_size and not getattr(
            tokenizer, "softmax_may_be_smaller", False):
        raise UserError(f"tokenizer {cfg.data.tokenizer} has {tokenizer.vocab_size} ids but "
                        f"model.vocab_size={cfg.model.vocab_size}")
    return tokenizer, build(cfg, tokenizer, imported)


def stages(cfg) -> list:
    """[(folder, config)] that `cfg` trains in turn: its entry's `stages` (a distillation's
    layer-by-layer transfer, then the distillation), else [("", cfg)] (one run)."""
    entry = get(cfg.objective)
    return (entry.stages(cfg) if entry.stages is not None else []) or [("", cfg)]


def load_tokenizer(cfg):
    """data.tokenizer in the ids cfg's model family trains it under (its
    tokenizer_layout: RoBERTa's fairseq ids over GPT-2's files or XLM-R's
    SentencePiece model); the objective may wrap it further."""
    family = registry.FAMILIES.find(cfg.model.family)
    return tokenizers.load_tokenizer(cfg.data.tokenizer, lower_case=cfg.data.lower_case,
                                     layout=family.tokenizer_layout if family else "")


def imports(cfg) -> dict:
    """{config key: path} of the models `cfg`'s objective reads besides init_from; a
    key left empty is refused in one line."""
    entry = get(cfg.objective)
    wanted = entry.imports(cfg) if entry.imports else {}
    for key, path in wanted.items():
        if not path:
            raise UserError(f"config key '{key}' is empty: the {entry.name} objective reads "
                            "a model from it")
    return wanted


def _check_switch(cfg, phase_cfg) -> None:
    """A phase's objective trains the run's model family, with the model keys the
    objective sets itself (own_model_keys: the attention it needs) at its values, so
    that switching objective states the switch of attention too. (That its parameters
    are the run's is checked by tracing them: train/run.py.)"""
    if phase_cfg.objective == cfg.objective:
        return
    entry = get(phase_cfg.objective)
    defaults = entry.defaults()
    wanted = defaults.model
    if wanted.family != cfg.model.family:
        raise UserError(f"objective {phase_cfg.objective} trains {wanted.family}; this run's "
                        f"model is {cfg.model.family} (a phase switches among one family's "
                        "objectives)")
    missing = sorted(set(config_lib.flatten(defaults)) - set(config_lib.flatten(phase_cfg)))
    if missing:
        raise UserError(f"objective {phase_cfg.objective} reads keys this run's config lacks "
                        f"({', '.join(missing[:4])}): its model is not the run's; a phase "
                        "switches only among objectives over the same parameters")
    for key in entry.own_model_keys:
        if phase_cfg.model.get(key) != wanted[key]:
            raise UserError(f"objective {phase_cfg.objective} trains with model.{key}="
                            f"{wanted[key]!r}; set it in the phase too (model.{key}="
                            f"{phase_cfg.model.get(key)!r} now)")


def default_config(name: str) -> ml_collections.ConfigDict:
    """Every key an `name` run has, with its paper's values."""
    return get(name).defaults()


def validate(cfg: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """Refuse what cannot train, naming the key: unknown keys, the checks every run
    shares, then the objective's own. Returns cfg for chaining."""
    entry = get(cfg.objective)
    config_lib.check_keys(cfg, entry.defaults())
    config_lib.validate_shared(cfg)
    formats.check_format(cfg.data.format)
    attention.validate(cfg.model)
    if cfg.data.train_files and cfg.data.train_source_names:
        sources.source_names(cfg.data.train_files, cfg.data.train_source_names)
    if phasing.named(cfg):
        for phase in phasing.phases(cfg):  # each phase's config, standing alone, first
            try:
                config_lib.validate_shared(phase.cfg)
                formats.check_format(phase.cfg.data.format)
                attention.validate(phase.cfg.model)
                _check_switch(cfg, phase.cfg)
                get(phase.cfg.objective).validate(phase.cfg)
            except UserError as e:
                raise UserError(f"phase {phase.name}: {e}") from None
        phasing.check(cfg)
    elif cfg.start_phase:
        raise UserError(f"start_phase={cfg.start_phase!r} needs named phases (phase_order)")
    entry.validate(cfg)
    return cfg
