"""Model families by `model.family`, each registered once by its folder's spec.py.

A family's entry (registry.Family) says what generic code may ask of it: the model
keys with its paper's values, and whether (and how) it fine-tunes and samples.
RoBERTa, SpanBERT, ALBERT and ELECTRA reuse BERT's modules and have entries of
their own, so that their runs fine-tune and export with their own model keys.
"""

from pretrainx.registry import FAMILIES, Family  # noqa: F401  (what generic code asks)


# The family of a model config with no `model.family`: one written before the key existed,
# when BERT was the only family. The one place that reads such a config as BERT's.
FAMILY_BEFORE_FAMILIES = "bert"


def family(name: str) -> Family:
    return FAMILIES.get(name, "model.family")


def family_name(model_cfg) -> str:
    """`model.family` of a model config (a ConfigDict or a stored config's dict)."""
    return model_cfg.get("family", FAMILY_BEFORE_FAMILIES)
