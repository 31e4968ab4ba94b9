"""Users' checkpoints keep restoring across refactors of the code.

Two fixtures written by this file at the commit before the families moved into
`pretrainx/families/` (`python tests/claims/test_layout_compat.py --write`, 2026-11-26 at
8dde485), and checked against the code as it is now:

- `tests/fixtures/layout_before_families.json`: the path, shape and dtype of every
  parameter and optimizer-state array of one recipe per family and objective. Orbax
  restores a checkpoint by these paths, so a renamed module, a moved counter or a new
  state leaf shows up here as a named difference instead of a failed resume.
- `tests/fixtures/workdir_before_families/`: a tiny BERT run stopped at step 3 (model,
  optimizer, data position and config), and the losses of the same run straight to
  step 6. Resumed with today's code it must repeat steps 4-6.

And a fine-tuned workdir of the layout before BERT's modules became the shared encoder
(`tests/fixtures/finetuned_before_shared_encoder/`, written at 3d10284), which must load
and classify as it did.
"""

import json
import pathlib
import shutil
import sys

import jax
import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from conftest import REPO, load_config, read_metrics, tiny_bert_config  # noqa: E402

DATA = REPO / "tests" / "fixtures"
MANIFEST = DATA / "layout_before_families.json"
WORKDIR = DATA / "workdir_before_families"

# one recipe per family and objective, each at its own (small) size
RECIPES = [("quickstart.py", None), ("roberta_base.py", None), ("spanbert_base.py", None),
           ("albert_base.py", None), ("electra_small.py", None), ("deberta_mlm.py", None),
           ("deberta_v3_xsmall.py", None), ("distilbert_base.py", None),
           ("modernbert_quickstart.py", None), ("crammed_quickstart.py", None),
           ("gpt2.py", "small"), ("t5_quickstart.py", None), ("bart_quickstart.py", None),
           ("elmo.py", "cpu")]


def _tree(tree) -> dict:
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {jax.tree_util.keystr(path): [list(leaf.shape), str(leaf.dtype)]
            for path, leaf in leaves}


def _layout(name: str, arg) -> dict:
    """Every array a checkpoint of this recipe holds, by path, from shapes alone."""
    from flax import linen as nn

    from pretrainx import config as config_lib
    from pretrainx import objectives
    from pretrainx.train import optim, state as state_lib
    cfg = load_config(name, arg)
    objectives.validate(cfg)
    objective = objectives.build(cfg, tokenizer=None)
    phase = config_lib.phases(cfg)[0]
    tx = optim.make_optimizer(cfg.optimizer, cfg.total_steps, getattr(objective, "frozen", ()))
    abstract = nn.unbox(state_lib.abstract_state(objective.model, tx,
                                                 objective.example_batch(1, phase)))
    return {"params": _tree(abstract.params), "opt_state": _tree(abstract.opt_state)}


def _key(name, arg) -> str:
    return name if arg is None else f"{name}:{arg}"


@pytest.mark.parametrize("name,arg", RECIPES, ids=[_key(*r) for r in RECIPES])
def test_every_recipe_keeps_its_checkpoint_layout(name, arg):
    before = json.loads(MANIFEST.read_text())[_key(name, arg)]
    now = _layout(name, arg)
    for part in ("params", "opt_state"):
        gone = sorted(set(before[part]) - set(now[part]))
        new = sorted(set(now[part]) - set(before[part]))
        changed = sorted(k for k in set(before[part]) & set(now[part])
                         if before[part][k] != now[part][k])
        assert not (gone or new or changed), (
            f"{name} {part}: a checkpoint written before would not restore; "
            f"gone {gone[:5]}, new {new[:5]}, changed {changed[:5]}")


def _tiny():
    """Small enough to store: 1 layer, width 16, the quickstart's 4,096 pieces."""
    return tiny_bert_config(**{"total_steps": 6, "checkpoint_every": 3,
                               "model.num_layers": 1, "model.hidden_size": 16,
                               "model.num_heads": 2, "model.mlp_dim": 32})


@pytest.mark.slow
def test_a_workdir_written_before_resumes_to_the_same_losses(tmp_path):
    from pretrainx.train import loop
    expected = json.loads((WORKDIR / "expected.json").read_text())
    workdir = tmp_path / "run"
    shutil.copytree(WORKDIR, workdir, ignore=shutil.ignore_patterns("expected.json"))
    loop.train(_tiny(), str(workdir))
    losses = [r["loss"] for r in read_metrics(workdir)]
    assert len(losses) == 6, losses
    assert losses[:3] == expected["losses"][:3]  # the stored records were kept
    # bit for bit on the JAX that wrote it; other XLA builds may round differently
    tolerance = 0.0 if jax.__version__ == expected["jax"] else 1e-5
    np.testing.assert_allclose(losses[3:], expected["losses"][3:], rtol=0, atol=tolerance)


FINETUNED = DATA / "finetuned_before_shared_encoder"


def test_a_finetuned_workdir_written_before_loads_and_gives_its_logits():
    """A fine-tuned workdir (best/ and finetune.json) written by the code before BERT's
    modules moved to models/transformer_encoder.py and BERT's model keys gained
    position_offset and pooler_activation (at 3d10284, by `_write_finetuned`: a
    1-layer BERT fine-tuned on 32 SST-2 rows) loads with today's code, its missing keys
    at BERT's defaults, and its classifier gives the logits it gave then."""
    import ml_collections

    from pretrainx import interop, models
    from pretrainx.models import peft as peft_lib
    expected = json.loads((FINETUNED / "expected.json").read_text())
    pretrained = interop.load(str(FINETUNED))
    assert pretrained.head == "classify" and pretrained.labels == ("0", "1")
    assert pretrained.model.position_offset == 0
    assert pretrained.model.pooler_activation == "tanh"
    module = models.family(pretrained.model.family).finetune_model(
        pretrained.model, pretrained.head, len(pretrained.labels),
        peft_lib.from_config(ml_collections.ConfigDict(pretrained.peft)))
    batch = {k: np.asarray(v, np.int32) for k, v in expected["batch"].items()}
    logits = module.apply({"params": pretrained.params}, batch)["logits"]
    # an ulp (1e-9 here) on the JAX that wrote it: the suite's XLA flags round a padded
    # row's attention apart from a plain process's; other XLA builds may round more
    tolerance = 1e-8 if jax.__version__ == expected["jax"] else 1e-6
    np.testing.assert_allclose(np.asarray(logits, np.float64), expected["logits"], rtol=0,
                               atol=tolerance)


def _write():
    """Writes both fixtures with the code checked out now (run before a refactor)."""
    import tempfile

    from pretrainx.train import loop
    MANIFEST.write_text(json.dumps({_key(n, a): _layout(n, a) for n, a in RECIPES},
                                   indent=0, sort_keys=True) + "\n")
    with tempfile.TemporaryDirectory() as tmp:
        loop.train(_tiny(), f"{tmp}/straight")
        losses = [r["loss"] for r in read_metrics(f"{tmp}/straight")]
        shutil.rmtree(WORKDIR, ignore_errors=True)
        loop.train(_tiny(), str(WORKDIR), stop_at=3)
    shutil.rmtree(WORKDIR / "logs", ignore_errors=True)
    (WORKDIR / "expected.json").write_text(json.dumps({"losses": losses, "jax": jax.__version__})
                                           + "\n")


def _write_finetuned(shared_glue: str):
    """Writes the fine-tuned fixture with the code checked out now, and the logits its
    classifier gives on a fixed batch (run before a refactor; PYTHONPATH=the checkout
    when another pretrainx is installed)."""
    import ml_collections

    from pretrainx import interop, models
    from pretrainx.finetune import loop
    from pretrainx.finetune.config import finetune_config
    from pretrainx.models import peft as peft_lib
    c = finetune_config()
    c.data.glue_dir, c.task, c.seq_len, c.epochs = shared_glue, "sst2", 32, 1
    c.global_batch_size, c.eval_batch_size, c.predict_test = 8, 16, False
    c.data.max_train_examples, c.data.max_eval_examples = 32, 16
    c.optimizer.learning_rate = 1e-3
    c.data.tokenizer, c.model = tiny_bert_config().data.tokenizer, tiny_bert_config().model
    c.model.num_layers, c.model.hidden_size, c.model.num_heads, c.model.mlp_dim = 1, 16, 2, 32
    shutil.rmtree(FINETUNED, ignore_errors=True)
    loop.train(c, str(FINETUNED), devices=jax.devices()[:1])
    for extra in ("predictions", "tensorboard", "checkpoints"):
        shutil.rmtree(FINETUNED / extra, ignore_errors=True)
    for extra in ("metrics.jsonl", "config.json"):
        (FINETUNED / extra).unlink(missing_ok=True)
    info = json.loads((FINETUNED / "finetune.json").read_text())
    info["tokenizer"] = "pretrainx/assets/" + pathlib.Path(info["tokenizer"]).name
    (FINETUNED / "finetune.json").write_text(json.dumps(info, indent=1, sort_keys=True))
    p = interop.load(str(FINETUNED))
    module = models.family(p.model.family).finetune_model(
        p.model, p.head, len(p.labels), peft_lib.from_config(ml_collections.ConfigDict(p.peft)))
    ids = np.random.default_rng(0).integers(5, 4000, size=(2, 12)).astype(np.int32)
    ids[:, 0] = 2
    mask = np.ones_like(ids)
    mask[1, 8:] = 0
    batch = {"input_ids": ids, "token_type_ids": np.zeros_like(ids), "attention_mask": mask}
    logits = np.asarray(module.apply({"params": p.params}, batch)["logits"], np.float64)
    (FINETUNED / "expected.json").write_text(json.dumps(
        {"batch": {k: v.tolist() for k, v in batch.items()}, "logits": logits.tolist(),
         "jax": jax.__version__}, indent=0))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--write-finetuned"] and len(sys.argv) == 3:
        _write_finetuned(sys.argv[2])
    elif sys.argv[1:] == ["--write"]:
        _write()
    else:
        raise SystemExit("usage: python tests/claims/test_layout_compat.py --write | "
                         "--write-finetuned GLUE_DIR")
