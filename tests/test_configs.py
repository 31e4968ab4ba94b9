"""Every recipe in configs/ passes its own checks as shipped: a recipe that refuses to
start is found here, not by the user who runs it."""

import pytest

from conftest import REPO, load_config

RECIPES = sorted(p.name for p in (REPO / "configs").glob("*.py"))


@pytest.mark.parametrize("name", RECIPES)
def test_every_recipe_validates_as_shipped(name):
    from pretrainx import objectives
    from pretrainx.finetune import config as finetune_config
    cfg = load_config(name)
    if cfg.get("objective") == "finetune":
        finetune_config.validate(cfg)
    else:
        objectives.validate(cfg)
