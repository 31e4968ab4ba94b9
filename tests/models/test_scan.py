"""model.scan_layers: one nn.scan over the layer stack must compute what the unrolled
stack computes, keep the program's size flat in depth, and shard like it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn

from conftest import tiny_bert_config, tiny_t5_config
from pretrainx import config as config_lib, objectives, sharding
from pretrainx.train import optim, state as state_lib

STACKS = ("layer", "encoder", "decoder")  # unrolled names are STACK_i, scanned STACKs


def _model_and_batch(cfg):
    objective = objectives.build(cfg, tokenizer=None)
    batch = objective.example_batch(2, config_lib.phases(cfg)[0])
    return objective.model, batch


def _restack(params):
    """Unrolled parameters {STACK_i: tree} -> the scanned layout {STACKs: stacked tree}."""
    out, groups = {}, {}
    for name, value in params.items():
        stack, _, index = name.rpartition("_")
        if stack in STACKS and index.isdigit():
            groups.setdefault(stack + "s", []).append((int(index), value))
        else:
            out[name] = _restack(value) if isinstance(value, dict) else value
    for name, members in groups.items():
        trees = [tree for _, tree in sorted(members, key=lambda m: m[0])]
        out[name] = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *trees)
    return out


def _assert_same(unrolled, scanned, params, stacked, batch, restack):
    """The scanned model's outputs and gradients are the unrolled one's (1e-5; the
    gradients relative to their largest, as leaves near 0 are sum-order noise)."""
    # jitted, as training runs them (eagerly, every op of every layer compiles alone)
    want = jax.jit(unrolled.apply)({"params": params}, batch)
    got = jax.jit(scanned.apply)({"params": stacked}, batch)
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-5, err_msg=key)

    def gradient(model):
        return jax.jit(jax.grad(lambda p: sum(
            jnp.sum(v ** 2) for v in model.apply({"params": p}, batch).values())))
    g_unrolled = restack(gradient(unrolled)(params))
    g_scanned = gradient(scanned)(stacked)
    want, got = jax.tree_util.tree_leaves(g_unrolled), jax.tree_util.tree_leaves(g_scanned)
    scale = max(float(np.max(np.abs(a))) for a in want)
    for a, b in zip(want, got):
        assert np.max(np.abs(b - a)) <= 1e-5 * scale


@pytest.mark.slow
@pytest.mark.parametrize("make", [tiny_bert_config, tiny_t5_config], ids=["bert", "t5"])
@pytest.mark.parametrize("remat", ["none", "full"])
def test_scanned_stack_computes_what_the_unrolled_one_does(make, remat):
    depth = {"model.num_layers": 2, "model.remat": remat}  # a stack, not one layer
    if make is tiny_t5_config:
        depth["model.num_decoder_layers"] = 2
    unrolled, batch = _model_and_batch(make(**depth))
    scanned, _ = _model_and_batch(make(**depth, **{"model.scan_layers": True}))
    rngs = {"params": jax.random.key(0), "dropout": jax.random.key(1)}
    params = nn.unbox(jax.jit(unrolled.init)(rngs, batch)["params"])
    stacked = _restack(params)
    scanned_shapes = jax.eval_shape(scanned.init, rngs, batch)["params"]
    assert (jax.tree_util.tree_structure(stacked)
            == jax.tree_util.tree_structure(nn.unbox(scanned_shapes)))
    _assert_same(unrolled, scanned, params, stacked, batch, _restack)


def _program_size(cfg):
    model, batch = _model_and_batch(cfg)
    rngs = {"params": jax.random.key(0), "dropout": jax.random.key(1)}
    params = jax.eval_shape(model.init, rngs, batch)

    def step(p, b):
        return jax.grad(lambda p: jnp.sum(model.apply(p, b)["mlm_logits"]))(p)
    return len(jax.jit(step).lower(params, batch).as_text())


def test_scan_keeps_the_program_flat_in_depth():
    def size(layers, scan):
        return _program_size(tiny_bert_config(**{"model.num_layers": layers,
                                                 "model.scan_layers": scan}))
    assert size(8, True) < 1.1 * size(2, True)
    assert size(8, False) > 2.0 * size(2, False)  # the measure sees depth when unrolled


def test_scanned_parameters_shard_like_unrolled_ones():
    mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
    specs = {}
    for scan in (False, True):
        cfg = tiny_bert_config(**{"model.scan_layers": scan})
        model, batch = _model_and_batch(cfg)
        tx = optim.make_optimizer(cfg.optimizer, cfg.total_steps)
        abstract = state_lib.abstract_state(model, tx, batch)
        shardings = state_lib.state_shardings(abstract, mesh, sharding.rules_of(cfg))
        encoder = shardings.params["bert"]
        specs[scan] = encoder["layers" if scan else "layer_0"]["attention"]["query"]["kernel"].spec
    assert tuple(specs[False]) == ("fsdp", "tensor", None)
    assert tuple(specs[True]) == (None, "fsdp", "tensor", None)  # the layer axis is whole


def _tiny_modernbert(layers, **keys):
    from conftest import load_config, override
    return override(load_config("modernbert_quickstart.py"), {
        "model.num_layers": layers, "model.hidden_size": 32, "model.num_heads": 2,
        "model.mlp_dim": 48, "model.local_attention": 8, "seq_len": 32,
        "data.max_predictions_per_seq": 12, **keys})


@pytest.mark.slow
@pytest.mark.parametrize("remat", ["none", "full"])
def test_modernbert_scans_groups_of_a_global_and_its_local_layers(remat):
    """7 layers: the first group (its first layer has no attention norm) and the last
    global layer unrolled, the group of layers 3-5 scanned (`layers_from_3`); the same
    outputs and gradients as the unrolled stack, interop converting between the two."""
    from pretrainx import interop
    unrolled, batch = _model_and_batch(_tiny_modernbert(7, **{"model.remat": remat}))
    scanned, _ = _model_and_batch(_tiny_modernbert(7, **{"model.remat": remat,
                                                         "model.scan_layers": True}))
    rngs = {"params": jax.random.key(0), "dropout": jax.random.key(1)}
    params = jax.device_get(nn.unbox(jax.jit(unrolled.init)(rngs, batch)["params"]))
    like = jax.device_get(nn.unbox(jax.eval_shape(scanned.init, rngs, batch)["params"]))
    assert sorted(like["model"]) == ["embed_norm", "final_norm", "layer_0", "layer_1",
                                     "layer_2", "layer_6", "layers_from_3", "token_embed"]
    stacked = interop.stack_layers(params, like)
    assert jax.tree_util.tree_structure(stacked) == jax.tree_util.tree_structure(like)
    back = interop.unstack_layers(stacked)
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree_util.tree_leaves(back),
                                                    jax.tree_util.tree_leaves(params)))
    _assert_same(unrolled, scanned, params, stacked, batch,
                 lambda tree: interop.stack_layers(tree, like))


def test_modernbert_scan_keeps_the_program_flat_in_depth():
    def size(layers, scan):
        return _program_size(_tiny_modernbert(layers, **{"model.scan_layers": scan}))
    assert size(28, True) < 1.1 * size(22, True)  # 22 and 28: base and large's depths
    assert size(28, False) > 1.2 * size(22, False)
