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


# Reads that keep a fallback for a key every config has, each for a stored file an older
# version wrote (a checkpoint's config, a fine-tuned model's record) or for a config
# of another kind passing through (file: keys)
_STORED_FILE_READS = {
    "interop/workdir.py": {"objective", "init_from"},  # a checkpoint's stored config
    "finetune/config.py": {"objective"},  # any config: is it a fine-tuning one?
    "compare/notebook.py": {"objective"},  # the message for a config of another objective
    "train/run.py": {"optimizer"},  # a checkpoint's stored config
    "models/__init__.py": {"family"},  # a stored model config from before families
}


def _fallback_reads():
    """[(module, line, receiver, key)] of every `X.get("key", ...)` in pretrainx whose
    receiver names a config (cfg, opt_cfg, model_cfg, cfg.data, ...)."""
    import ast
    import re
    found = []
    package = REPO / "pretrainx"
    for path in package.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "get" and node.args
                    and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str)):
                continue
            receiver = ast.unparse(node.func.value)
            if re.search(r"(^|\.|_)(cfg|config|optimizer|model|data|opt)$", receiver):
                found.append((str(path.relative_to(package)), node.lineno, receiver,
                              node.args[0].value))
    return found


def test_no_config_read_falls_back_for_a_key_every_config_has():
    """`cfg.get(key, fallback)` repeats a default where every config has the key: the
    fallback can drift from the default it shadows. A key every pretraining objective's
    defaults and the fine-tuning config both hold (or, for a model config, every
    family's model keys) is read directly; what remains reads a key only some families
    or objectives have, or a file an older version wrote."""
    from pretrainx import config as config_lib
    from pretrainx import models, objectives
    from pretrainx.finetune import config as finetune_config
    flat = [config_lib.flatten(objectives.default_config(n)) for n in _objectives()]
    flat.append(config_lib.flatten(finetune_config.finetune_config()))
    everywhere = set.intersection(*(set(f) | {k.rsplit(".", 1)[0] for k in f if "." in k}
                                    for f in flat))
    model_keys = set.intersection(*(set(f.default_config()) for f in models.FAMILIES.entries()))
    shadowing = []
    for module, line, receiver, key in _fallback_reads():
        if key in _STORED_FILE_READS.get(module, ()):
            continue
        section = receiver.rsplit(".", 1)[-1]
        sections = {"optimizer": ["optimizer."], "opt_cfg": ["optimizer."], "opt": ["optimizer."],
                    "data": ["data."], "data_cfg": ["data."]}.get(section, ["", "model."])
        if any(p + key in everywhere for p in sections) or (
                "model." in sections and key in model_keys) or (
                section in ("model", "model_cfg") and key in model_keys):
            shadowing.append(f"{module}:{line} {receiver}.get({key!r})")
    assert not shadowing, shadowing
