"""The train state, created directly sharded over the mesh."""

from typing import Any

import flax
import jax
import jax.numpy as jnp
from flax import linen as nn

from pretrainx import sharding


@flax.struct.dataclass
class TrainState:
    step: jax.Array  # completed optimizer steps; also drives the dropout RNG and lr
    params: Any
    opt_state: Any


def _is_box(x):
    return isinstance(x, nn.LogicallyPartitioned)


def _name_like_params(opt_state, params):
    """Give every optimizer-state array shaped like its parameter that parameter's
    logical axes (Adam's moments, Adafactor's unfactored second moments); anything
    else (counts, Adafactor's row/column statistics) stays unnamed, i.e. replicated.
    A state leaf is matched by its path ending in a parameter's path, so moments of a
    masked or partly frozen tree (optax.multi_transform) are named too."""
    boxes = dict(jax.tree_util.tree_flatten_with_path(params, is_leaf=_is_box)[0])

    def name(path, leaf):
        for start in range(len(path)):
            box = boxes.get(tuple(path[start:]))
            if box is not None:
                return box.replace_boxed(leaf) if leaf.shape == box.value.shape else leaf
        return leaf

    return jax.tree_util.tree_map_with_path(name, opt_state)


def _init_fn(model, tx, example_batch):
    def init(key):
        variables = model.init({"params": key, "dropout": key}, example_batch, deterministic=True)
        params = variables["params"]
        opt_state = _name_like_params(tx.init(nn.unbox(params)), params)
        return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=opt_state)
    return init


def abstract_state(model, tx, example_batch):
    """Shapes and logical axis annotations of the state, without allocating it."""
    return jax.eval_shape(_init_fn(model, tx, example_batch), jax.random.key(0))


def state_shardings(abstract, mesh, rules):
    """NamedShardings of the state from the logical axes of `abstract_state`."""
    return sharding.logical_to_sharding(nn.get_partition_spec(abstract), mesh, rules)


def count_params(abstract) -> int:
    params = nn.unbox(abstract.params) if hasattr(abstract, "params") else nn.unbox(abstract)
    return int(sum(x.size for x in jax.tree_util.tree_leaves(params)))


def create_state(model, tx, example_batch, seed: int, mesh, rules, shardings=None):
    """Initialise parameters and optimizer state where they live: each device
    builds only its own shard (jitted init with out_shardings)."""
    if shardings is None:
        shardings = state_shardings(abstract_state(model, tx, example_batch), mesh, rules)
    init = _init_fn(model, tx, example_batch)
    with sharding.activate(mesh, rules):
        state = jax.jit(lambda key: nn.unbox(init(key)), out_shardings=shardings)(
            jax.random.key(seed))
    return state, shardings
