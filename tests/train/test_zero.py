"""ZeRO-1 (mesh.shard_optimizer): data parallelism whose optimizer state and update are
split over the data axis. It must train exactly as plain data parallelism, hold 1/N of
the moments per device in the compiled program, and resume a plain run's checkpoint
(the two-process case is in test_multihost.py)."""

import jax
import numpy as np
import pytest
from flax import linen as nn

from conftest import read_metrics, tiny_bert_config
from pretrainx import config as config_lib, objectives, sharding
from pretrainx.train import loop, optim, state as state_lib, step as step_lib
from pretrainx.train import phases as phases_lib

DATA_8 = {"mesh.data": 8, "mesh.fsdp": 1, "mesh.tensor": 1}


def _losses(workdir):
    return [r["loss"] for r in read_metrics(workdir)]


def _compiled_step(cfg, shard_optimizer: bool):
    """The train step compiled for `cfg` on the 8 devices, from shapes alone, and the
    state's shardings."""
    objective = objectives.build(cfg, tokenizer=None)
    mesh, rules = sharding.make_mesh(cfg.mesh), sharding.rules_of(cfg)
    schedule = phases_lib.learning_rate(cfg)
    tx = optim.make_optimizer(cfg.optimizer, cfg.total_steps, (), cfg.optimizer.ema_decay,
                              schedule)
    phase = config_lib.phases(cfg)[0]
    abstract = state_lib.abstract_state(objective.model, tx, objective.example_batch(1, phase))
    shardings = state_lib.state_shardings(abstract, mesh, rules, shard_optimizer)
    zero = state_lib.zero_of(abstract, shardings, mesh, rules, shard_optimizer)
    batch_sharding = sharding.batch_sharding(mesh, rules)
    state = jax.tree_util.tree_map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                                   nn.unbox(abstract), shardings)
    batch = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=batch_sharding)
             for k, v in objective.example_batch(cfg.global_batch_size, phase).items()}
    repl = sharding.replicated(mesh)
    key = jax.ShapeDtypeStruct((), jax.random.key(0).dtype, sharding=repl)
    clock = {k: jax.ShapeDtypeStruct((), v.dtype, sharding=repl)
             for k, v in step_lib.clock(0).items()}
    step = step_lib.compile_train_step(
        step_lib.make_train_step(objective.model, tx, objective, schedule, 1, zero), mesh,
        rules, shardings, {k: batch_sharding for k in batch})
    return step.lower(state, batch, key, clock).compile(), abstract, shardings


@pytest.mark.slow
def test_zero1_trains_as_data_parallelism_and_its_checkpoint_resumes_without_it(tmp_path):
    """On 8 data-parallel devices, 3 steps with ZeRO-1 and then 3 more resumed from its
    checkpoint without it give plain data parallelism's 6 losses to 1e-6 (a plain
    checkpoint resumed with ZeRO-1 on 2 processes: test_multihost.py)."""
    plain = tiny_bert_config(total_steps=6, checkpoint_every=3, **DATA_8)
    zero = tiny_bert_config(total_steps=6, checkpoint_every=3, **DATA_8,
                            **{"mesh.shard_optimizer": True})
    loop.train(plain, str(tmp_path / "plain"))
    loop.train(zero, str(tmp_path / "zero"), stop_at=3)
    loop.train(plain, str(tmp_path / "zero"))
    a, b = _losses(tmp_path / "plain"), _losses(tmp_path / "zero")
    assert len(a) == len(b) == 6 and a[0] != a[-1]
    np.testing.assert_allclose(b, a, rtol=0, atol=1e-6)


def test_zero1_keeps_an_eighth_of_the_moments_per_device_in_the_compiled_step():
    """The compiled program's own sizes: with ZeRO-1 each device's arguments shrink by
    7/8 of the Adam moments (within the few small leaves no split divides), and every
    moment of a weight matrix is split 8 ways while its parameter stays whole."""
    cfg = tiny_bert_config(**DATA_8)
    plain, abstract, _ = _compiled_step(cfg, False)
    zero, _, shardings = _compiled_step(cfg, True)
    params = nn.unbox(abstract).params
    moments = 2 * sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(params))
    saved = (plain.memory_analysis().argument_size_in_bytes
             - zero.memory_analysis().argument_size_in_bytes)
    assert 0.95 * moments * 7 / 8 <= saved <= moments * 7 / 8, (saved, moments)

    mu = shardings.opt_state
    flat_params = jax.tree_util.tree_flatten_with_path(params)[0]
    flat_state = dict(jax.tree_util.tree_flatten_with_path(
        mu, is_leaf=lambda x: isinstance(x, jax.sharding.NamedSharding))[0])
    kernels = [(path, x) for path, x in flat_params if x.ndim == 2 and x.shape[0] % 8 == 0]
    assert kernels
    for path, x in kernels:
        split = [s for p, s in flat_state.items() if p[-len(path):] == path]
        assert split, path
        for s in split:
            assert s.shard_shape(x.shape)[0] * 8 == x.shape[0] or \
                s.shard_shape(x.shape)[1] * 8 == x.shape[1], (path, s)
    for s in jax.tree_util.tree_leaves(shardings.params):  # the parameters stay whole
        assert s.is_fully_replicated
