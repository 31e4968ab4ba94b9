"""The optimizer as the recipes need it: schedules that follow the run's step, even
across skipped (non-finite) steps."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import linen as nn

from pretrainx.train import optim
from pretrainx.train import step as step_lib
from pretrainx.train.state import TrainState


class _Linear(nn.Module):
    @nn.compact
    def __call__(self, batch, deterministic=True):
        return {"y": nn.Dense(1)(batch["x"])}


class _Squares:
    """loss = sum of squared outputs: a NaN input makes it non-finite."""

    def loss_sums(self, outputs, batch):
        return {"sq": jnp.sum(jnp.square(outputs["y"]))}

    def normalizers(self, batch):
        return {"n": jnp.ones(())}

    def loss(self, sums, norms):
        return sums["sq"] / norms["n"]

    def metrics(self, sums, norms):
        return {}


def _adam_count(opt_state):
    nodes = jax.tree_util.tree_leaves(opt_state, is_leaf=lambda x: isinstance(x, optax.ScaleByAdamState))
    return [int(n.count) for n in nodes if isinstance(n, optax.ScaleByAdamState)]


def test_a_skipped_step_moves_the_schedule_on_and_nothing_else():
    cfg = ml_collections.ConfigDict(dict(name="adamw", learning_rate=1e-2, warmup_steps=0,
                                         schedule="warmup_linear", b1=0.9, b2=0.999, eps=1e-6,
                                         weight_decay=0.0, grad_clip=0.0))
    model, objective = _Linear(), _Squares()
    good = {"x": np.ones((4, 3), np.float32)}
    bad = {"x": np.full((4, 3), np.nan, np.float32)}
    params = model.init(jax.random.key(0), good)["params"]
    tx, schedule = optim.make_optimizer(cfg, 10), optim.learning_rate_schedule(cfg, 10)
    step = jax.jit(step_lib.make_train_step(model, tx, objective, schedule, 1))
    state = TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params))
    state, _ = step(state, good, jax.random.key(1))
    before = state
    for _ in range(2):
        state, metrics = step(state, bad, jax.random.key(1))
        assert metrics["skipped"] == 1.0
    for a, b in zip(jax.tree_util.tree_leaves(before.params), jax.tree_util.tree_leaves(state.params)):
        assert np.array_equal(a, b)  # the skipped steps changed no parameter
    assert _adam_count(state.opt_state) == [1]  # nor Adam's moments or bias correction
    assert [int(c) for c in optim.schedule_steps(state.opt_state)] == [3] == [int(state.step)]
    # The next update is applied at step 3's learning rate, the one it logs.
    state, metrics = step(state, good, jax.random.key(1))
    assert np.isclose(metrics["learning_rate"], schedule(3))
    adam = optax.adam(1.0, b1=0.9, b2=0.999, eps=1e-6)  # the same direction, at lr 1
    grads = jax.grad(lambda p: objective.loss(objective.loss_sums(
        model.apply({"params": p}, good), good), {"n": 1.0}))(before.params)
    direction, _ = adam.update(grads, adam.update(jax.grad(lambda p: objective.loss(
        objective.loss_sums(model.apply({"params": p}, good), good), {"n": 1.0}))(params),
        adam.init(params))[1])
    expected = jax.tree_util.tree_map(lambda p, d: p + schedule(3) * d, before.params, direction)
    for a, b in zip(jax.tree_util.tree_leaves(expected), jax.tree_util.tree_leaves(state.params)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
