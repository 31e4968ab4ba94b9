"""Objectives by config key `objective`, each registered by its own module.

A module registers an `Entry` (contract.py) at import; the first lookup imports
every module of this package, so adding an objective edits no table here.
"""

import ml_collections

from pretrainx import config as config_lib
from pretrainx.objectives.contract import Entry  # noqa: F401  (what modules register)
from pretrainx.registry import Registry

OBJECTIVES = Registry("pretrainx.objectives", "objective")
register = OBJECTIVES.register


def get(name: str) -> Entry:
    return OBJECTIVES.get(name, "objective")


def build(cfg, tokenizer):
    """The objective of `cfg` (tokenizer None: shapes only, as --describe needs)."""
    return get(cfg.objective).build(cfg, tokenizer)


def default_config(name: str) -> ml_collections.ConfigDict:
    """Every key an `name` run has, with its paper's values."""
    return get(name).defaults()


def validate(cfg: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """Refuse what cannot train, naming the key: unknown keys, the checks every run
    shares, then the objective's own. Returns cfg for chaining."""
    entry = get(cfg.get("objective", "bert"))
    config_lib.check_keys(cfg, entry.defaults())
    config_lib.validate_shared(cfg)
    entry.validate(cfg)
    return cfg
