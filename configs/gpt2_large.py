"""GPT-2 large: configs/gpt2.py:large (see there for the recipe)."""

from pretrainx.config import sibling_config


def get_config():
    return sibling_config(__file__, "gpt2.py", "large")
