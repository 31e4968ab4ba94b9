"""The jitted train and eval steps.

The loss is normalised by denominators taken from the whole global batch before
it is split into micro-batches, so the gradient is the same whatever the number of
micro-batches or devices (only the dropout draws differ with micro-batching).
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn

from pretrainx import sharding
from pretrainx.train import optim
from pretrainx.train.state import TrainState


def _split_micro(batch, micro_batches: int):
    """[B, ...] -> [M, B/M, ...] taking every M-th row, so each device's shard
    feeds every micro-batch evenly."""
    def split(x):
        x = x.reshape((x.shape[0] // micro_batches, micro_batches) + x.shape[1:])
        x = jnp.swapaxes(x, 0, 1)
        return nn.with_logical_constraint(x, (None, "batch") + (None,) * (x.ndim - 2))
    return jax.tree_util.tree_map(split, batch)


def clock(schedule_step: int, every: int = 1, sharding=None) -> dict:
    """What the host tells a train step besides the batch: the step the learning-rate
    schedules read (the optimizer step, or a wall-clock budget's share of total_steps)
    and how many steps' gradients an update averages (a batch-size ramp); int32
    scalars, placed with `sharding` (replicated) when given."""
    values = {"schedule_step": np.int32(schedule_step), "every": np.int32(every)}
    if sharding is None:
        return values
    return jax.device_put(values, sharding)  # one transfer for both, each step


def _accumulated(loss_fn, grad_fn, params, batch, norms, rng, micro_batches: int):
    """(loss, sums, gradients) summed over the batch's micro-batches in a lax.scan, each
    with its own dropout key; `loss_fn` and `grad_fn` as make_train_step's."""
    micro = _split_micro(batch, micro_batches)

    def accumulate(carry, xs):
        index, mb = xs
        (l, s), g = grad_fn(params, mb, norms, jax.random.fold_in(rng, index))
        acc_l, acc_s, acc_g = carry
        return (acc_l + l, jax.tree_util.tree_map(jnp.add, acc_s, s),
                jax.tree_util.tree_map(jnp.add, acc_g, g)), None

    first = jax.tree_util.tree_map(lambda x: x[0], micro)
    _, zeros_s = jax.eval_shape(lambda: loss_fn(params, first, norms, rng))  # no backward
    zeros = (jnp.zeros((), jnp.float32), jax.tree_util.tree_map(jnp.zeros_like, zeros_s),
             jax.tree_util.tree_map(jnp.zeros_like, params))
    return jax.lax.scan(accumulate, zeros, (jnp.arange(micro_batches), micro))[0]


def make_train_step(model, tx, objective, schedule, micro_batches: int, zero=None):
    """(state, batch, key, clock) -> (state, metrics); pure, to be jitted by
    `compile_train_step`. `clock` (see `clock`) sets the schedules' step and the
    accumulation inside the step; None: they follow the optimizer's own counters.

    `zero` (ZeRO-1, mesh.shard_optimizer): (the parameters' shardings, the same split
    over the data-parallel axes as state.over_data gives them). The gradients are summed
    as the parameters are laid out and then constrained to the split one, the optimizer
    updates each device's slice of the parameters with its slice of the moments, and the
    updated parameters are constrained back (an all-gather). Explicit constraints keep
    the compiler from choosing FSDP's layout."""
    constrain = jax.lax.with_sharding_constraint

    def loss_fn(params, batch, norms, rng):
        outputs = model.apply({"params": params}, batch, deterministic=False,
                              rngs={"dropout": rng})
        sums = objective.loss_sums(outputs, batch)
        return objective.loss(sums, norms), sums

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def step(state: TrainState, batch, base_key, clock=None):
        if clock is None:
            opt_state, schedule_step = state.opt_state, optim.clock(state.opt_state, state.step)
        else:
            opt_state = optim.set_clock(state.opt_state, clock["schedule_step"], clock["every"])
            schedule_step = clock["schedule_step"]
        norms = objective.normalizers(batch)
        rng = jax.random.fold_in(base_key, state.step)
        if micro_batches == 1:
            (loss, sums), grads = grad_fn(state.params, batch, norms, rng)
        else:
            loss, sums, grads = _accumulated(loss_fn, grad_fn, state.params, batch, norms,
                                             rng, micro_batches)
        if zero is not None:  # summed whole, then split (an all-reduce and a slice in
            # the programs compiled here); split at once, XLA gathered activations instead
            grads = constrain(constrain(grads, zero[0]), zero[1])
        grad_norm = optax.tree.norm(grads)

        def apply_update():
            params = state.params if zero is None else constrain(state.params, zero[1])
            updates, new_opt_state = tx.update(grads, opt_state, params)
            params = optax.apply_updates(params, updates)
            return (params if zero is None else constrain(params, zero[0])), new_opt_state

        # One bad batch must not poison a long run: a non-finite loss or gradient
        # leaves parameters and optimizer state as they were (the step and the data
        # still advance, and so do the learning-rate schedules, which follow the step).
        finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
        params, new_opt_state = jax.lax.cond(
            finite, apply_update, lambda: (state.params, optim.advance_schedules(opt_state)))
        metrics = dict(objective.metrics(sums, norms), loss=loss, grad_norm=grad_norm,
                       learning_rate=schedule(schedule_step),
                       skipped=1.0 - finite.astype(jnp.float32))
        return TrainState(step=state.step + 1, params=params, opt_state=new_opt_state), metrics

    return step


def make_eval_step(model, objective):
    """(params, batch) -> sums of the objective's terms, dropout off."""
    def step(params, batch):
        outputs = model.apply({"params": params}, batch, deterministic=True)
        return objective.loss_sums(outputs, batch)
    return step


class Compiled:
    """A jitted function that always traces under the mesh and the logical rules."""

    def __init__(self, fn, mesh, rules, **jit_kwargs):
        self._fn = jax.jit(fn, **jit_kwargs)
        self._mesh, self._rules = mesh, rules

    def __call__(self, *args):
        with sharding.activate(self._mesh, self._rules):
            return self._fn(*args)

    def lower(self, *args):
        """Ahead-of-time lowering from shapes (jax.ShapeDtypeStruct), for the planner."""
        with sharding.activate(self._mesh, self._rules):
            return self._fn.lower(*args)


def compile_train_step(step_fn, mesh, rules, state_shardings, batch_shardings):
    repl = sharding.replicated(mesh)
    return Compiled(step_fn, mesh, rules,
                    in_shardings=(state_shardings, batch_shardings, repl, repl),
                    out_shardings=(state_shardings, repl), donate_argnums=(0,))


def compile_eval_step(step_fn, mesh, rules, param_shardings, batch_shardings):
    return Compiled(step_fn, mesh, rules, in_shardings=(param_shardings, batch_shardings),
                    out_shardings=sharding.replicated(mesh))
