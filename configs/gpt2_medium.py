"""GPT-2 medium: configs/gpt2.py:medium (see there for the recipe)."""

from pretrainx.config import sibling_config


def get_config():
    return sibling_config(__file__, "gpt2.py", "medium")
