"""ULMFiT's fine-tuning methods (Howard and Ruder 2018): slanted triangular learning
rates, discriminative (layer-wise) learning rates, gradual unfreezing, and a task's own
text as a pretraining source (task-adaptive pretraining)."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from conftest import PRETRAINED_DEPTH, override, tiny_bert_config
from pretrainx import interop, pretrain
from pretrainx.data import sources
from pretrainx.errors import UserError
from pretrainx.finetune import layerwise
from pretrainx.finetune import loop as finetune_loop
from pretrainx.finetune.config import finetune_config
from pretrainx.models import heads
from pretrainx.train import schedules


def _ft(shared_data, **overrides):
    c = finetune_config()
    c.data.glue_dir = str(shared_data / "glue")
    c.update_from_flattened_dict({
        "seq_len": 32, "global_batch_size": 16, "eval_batch_size": 64, "epochs": 1,
        "log_every": 1000, "data.max_train_examples": 16, "data.max_eval_examples": 64,
        "optimizer.learning_rate": 1e-3, **overrides})
    return c


def test_slanted_triangular_rates_at_start_peak_and_end():
    """Eq. 3: from peak/ratio up to the peak at the cut, down to peak/ratio at T."""
    opt = ml_collections.ConfigDict({"learning_rate": 0.01, "warmup_steps": 10,
                                     "schedule": "slanted_triangular", "stlr_ratio": 32.0})
    lr = schedules.learning_rate_schedule(opt, 100)
    assert float(lr(0)) == pytest.approx(0.01 / 32)
    assert float(lr(5)) == pytest.approx(0.01 * (1 + 0.5 * 31) / 32)
    assert float(lr(10)) == pytest.approx(0.01)
    assert float(lr(55)) == pytest.approx(0.01 * (1 + 0.5 * 31) / 32)
    assert float(lr(100)) == pytest.approx(0.01 / 32)


def _depth_of(names, tree):
    for n in names:
        tree = tree[n]
    return tree


def test_depths_follow_the_stack(pretrained_workdir):
    """Embeddings 0, layer i at i + 1, pooler and head at the top (2 layers: 3)."""
    params = interop.load(pretrained_workdir).params
    params = {"bert": params["bert"], "classifier": {"kernel": np.zeros((2, 2))}}
    depth, top = layerwise.depths(params, heads.HEAD_MODULES)
    assert top == 3
    assert _depth_of(["bert", "token_embed", "embedding"], depth) == 0
    assert _depth_of(["bert", "embed_norm", "scale"], depth) == 0
    assert _depth_of(["bert", "layer_0", "mlp", "wi", "kernel"], depth) == 1
    assert _depth_of(["bert", "layer_1", "attention", "query", "kernel"], depth) == 2
    assert _depth_of(["classifier", "kernel"], depth) == 3
    scales = layerwise.learning_rate_scales(depth, top, 0.8)
    assert _depth_of(["bert", "token_embed", "embedding"], scales) == pytest.approx(0.8 ** 3)


def _moved(before, after):
    """The largest |change| of a tensor: Adam's first step moves a value by
    lr * |g| / (|g| + eps), its learning rate wherever the gradient is not tiny."""
    return float(np.max(np.abs(after - before)))


def test_layer_lr_decay_sets_each_layers_rate(shared_data, pretrained_workdir, tmp_path):
    """One AdamW step at a constant rate, no decay or clipping: Adam's first step moves
    a value by ~lr, so at layer_lr_decay 0.5 layer 1 moves by lr/2, layer 0 by lr/4 and
    the embeddings by lr/8 (the head, at the top, by lr)."""
    cfg = _ft(shared_data, init_from=pretrained_workdir, **{
        "optimizer.layer_lr_decay": 0.5, "optimizer.schedule": "constant",
        "optimizer.warmup_fraction": 0.0, "optimizer.weight_decay": 0.0,
        "optimizer.grad_clip": 0.0})
    finetune_loop.train(cfg, str(tmp_path), devices=jax.devices()[:1])
    before, after = interop.load(pretrained_workdir).params["bert"], \
        interop.load(str(tmp_path)).params["bert"]
    lr = 1e-3
    for names, scale in ((["layer_1", "mlp", "wi", "kernel"], 0.5),
                         (["layer_0", "mlp", "wi", "kernel"], 0.25),
                         (["token_embed", "embedding"], 0.125)):
        got = _moved(np.asarray(_depth_of(names, before)), np.asarray(_depth_of(names, after)))
        assert got == pytest.approx(lr * scale, rel=0.02), names


def test_gradual_unfreezing_trains_one_more_layer_each_epoch(pretrained_workdir):
    """The optimizer on the fine-tuning model's real tree, 2 steps an epoch: in epoch
    1 only the head and pooler move, in epoch 2 layer 1 joins, in epoch 3 layer 0; until
    then each frozen value is bit-identical and has no Adam moment."""
    pretrained = interop.load(pretrained_workdir)
    params = jax.tree_util.tree_map(jnp.asarray, {
        "bert": pretrained.params["bert"], "pooler": {"kernel": jnp.ones((64, 64))},
        "classifier": {"kernel": jnp.ones((64, 2))}})
    cfg = finetune_config()
    cfg.epochs = 4
    cfg.optimizer.gradual_unfreezing = True
    tx, _ = finetune_loop._optimizer(cfg, 8, finetune_loop.peft_lib.from_config(cfg.peft),
                                      params, steps_per_epoch=2)
    state = tx.init(params)
    grads = jax.tree_util.tree_map(jnp.ones_like, params)
    start = params
    # jitted: eagerly, each op of the update compiles alone (193 compiles)
    update, apply_updates = jax.jit(tx.update), jax.jit(optax.apply_updates)
    moving = {1: {"pooler", "classifier"}, 2: {"pooler", "classifier", "layer_1"},
              3: {"pooler", "classifier", "layer_1", "layer_0"}}
    for epoch in (1, 2, 3):
        for _ in range(2):
            updates, state = update(grads, state, params)
            params = apply_updates(params, updates)
        for path, value in jax.tree_util.tree_leaves_with_path(params):
            names = [k.key for k in path]
            group = names[1] if names[0] == "bert" and names[1].startswith("layer") else (
                "embeddings" if names[0] == "bert" else names[0])
            same = np.asarray(value).tobytes() == np.asarray(
                _depth_of(names, start)).tobytes()
            assert same == (group not in moving[epoch]), (epoch, names)


def test_gradual_unfreezing_one_epoch_moves_only_the_head(shared_data, pretrained_workdir,
                                                          tmp_path):
    cfg = _ft(shared_data, init_from=pretrained_workdir,
              **{"optimizer.gradual_unfreezing": True})
    finetune_loop.train(cfg, str(tmp_path), devices=jax.devices()[:1])
    before, after = interop.load(pretrained_workdir).params, interop.load(str(tmp_path)).params
    for path, value in jax.tree_util.tree_leaves_with_path(after["bert"]):
        names = [k.key for k in path]
        assert np.asarray(value).tobytes() == np.asarray(
            _depth_of(names, before["bert"])).tobytes(), names


@pytest.mark.slow
def test_task_text_continues_pretraining(shared_data, pretrained_workdir, tmp_path):
    """ULMFiT's stage 2: a pretrained workdir continues MLM on SST-2's own sentences
    (data.format auto reads the .tsv, data.text_field names the column), starting from
    its weights; docs/finetuning.md's block runs all three stages as commands."""
    adapted = str(tmp_path / "adapted")
    cfg = tiny_bert_config(total_steps=2, checkpoint_every=2, init_from=pretrained_workdir,
                           **PRETRAINED_DEPTH)
    cfg.data.train_files = str(shared_data / "glue" / "SST-2" / "train.tsv")
    cfg.data.text_field = "sentence"
    cfg.data.eval_files = ""
    fresh = tiny_bert_config(total_steps=2, checkpoint_every=2, **PRETRAINED_DEPTH)
    fresh.data.train_files, fresh.data.text_field = cfg.data.train_files, "sentence"
    fresh.data.eval_files = ""
    first = pretrain.train(cfg, adapted, devices=jax.devices()[:1])["train"]
    scratch = pretrain.train(fresh, str(tmp_path / "fresh"), devices=jax.devices()[:1])["train"]
    assert np.isfinite(first["loss"]) and first["loss"] != scratch["loss"]
    assert interop.load(adapted).family == "bert"


def test_task_files_read_as_documents(shared_data):
    glue = shared_data / "glue"
    docs, stats = sources.read_documents(str(glue / "MRPC" / "train.tsv"),
                                         text_field="#1 String,#2 String")
    assert len(docs) == stats["records"] == 3668 and all(len(d) >= 2 for d in docs)
    docs, _ = sources.read_documents(str(glue / "CoNLL-2003" / "train.txt"), "conll")
    assert sum(len(d) for d in docs) == 14041  # CoNLL-2003's training sentences
    assert docs[0][0] == "EU rejects German call to boycott British lamb ."
    with pytest.raises(UserError, match=r"train.tsv has no column 'text'.*sentence"):
        sources.read_documents(str(glue / "SST-2" / "train.tsv"))


@pytest.mark.parametrize("key, value", [("optimizer.layer_lr_decay", 0.0),
                                        ("optimizer.layer_lr_decay", 1.2),
                                        ("optimizer.stlr_ratio", 0.5),
                                        ("optimizer.schedule", "triangle")])
def test_bad_ulmfit_keys_are_one_line(shared_data, key, value):
    from pretrainx.finetune import config as ft_config
    with pytest.raises(UserError, match=key.split(".")[1]) as info:
        ft_config.validate(override(_ft(shared_data), {key: value}))
    assert "\n" not in str(info.value)
