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


def _sets_while_building(build):
    """{key path: [values it was given, in order]} while `build()` makes a config: every
    assignment to (and deletion from) a ConfigDict on the way, by its path in the
    finished config."""
    import ml_collections
    record = []  # (ConfigDict id, key, value)
    cls = ml_collections.ConfigDict
    real_set, real_del = cls.__setitem__, cls.__delitem__

    def setting(self, key, value):
        record.append((id(self), key, value))
        return real_set(self, key, value)

    def deleting(self, key):
        record.append((id(self), key, "<deleted>"))
        return real_del(self, key)
    cls.__setitem__, cls.__delitem__ = setting, deleting
    try:
        cfg = build()
    finally:
        cls.__setitem__, cls.__delitem__ = real_set, real_del
    paths = {}

    def walk(node, prefix):
        paths[id(node)] = prefix
        for key, value in node.items():
            if isinstance(value, cls):
                walk(value, f"{prefix}{key}.")
    walk(cfg, "")
    given = {}
    for node, key, value in record:
        if node in paths:
            given.setdefault(paths[node] + key, []).append(value)
    return given


def _objectives():
    from pretrainx import objectives
    return sorted(e.name for e in objectives.OBJECTIVES.entries())


@pytest.mark.parametrize("objective", _objectives())
def test_every_default_is_set_in_one_place(objective):
    """Building an objective's defaults (the shared keys, then its family's) gives no key
    two values on the way, and deletes none: a key's default lives in one place, the
    shared config or the family's. (134 keys were set twice, BERT-Base's value first.)"""
    from pretrainx import objectives
    given = _sets_while_building(lambda: objectives.default_config(objective))
    twice = {key: values for key, values in given.items()
             if len({repr(v) for v in values}) > 1}
    assert not twice, "\n".join(f"{k}: {' -> '.join(map(repr, v))}" for k, v in
                                sorted(twice.items()))


def test_the_one_place_test_finds_a_key_set_twice():
    """The recorder above sees an override made after the fact."""
    from pretrainx import objectives

    def overridden():
        c = objectives.default_config("bert")
        c.optimizer.b2 = 0.98
        return c
    assert _sets_while_building(overridden)["optimizer.b2"] == [0.999, 0.98]
