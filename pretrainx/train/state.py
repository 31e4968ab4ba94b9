"""The train state, created directly sharded over the mesh."""

from typing import Any

import flax
import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn, traverse_util
from jax.sharding import NamedSharding, PartitionSpec as P

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


def _init_params(model, example_batch, key):
    return model.init({"params": key, "dropout": key}, example_batch,
                      deterministic=True)["params"]


def _init_fn(model, tx, example_batch):
    def init(key):
        params = _init_params(model, example_batch, key)
        opt_state = _name_like_params(tx.init(nn.unbox(params)), params)
        return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=opt_state)
    return init


def abstract_state(model, tx, example_batch):
    """Shapes and logical axis annotations of the state, without allocating it."""
    return jax.eval_shape(_init_fn(model, tx, example_batch), jax.random.key(0))


def abstract_params(model, example_batch):
    """Shapes and logical axis annotations of the model's parameters alone."""
    return jax.eval_shape(lambda key: _init_params(model, example_batch, key),
                          jax.random.key(0))


def state_shardings(abstract, mesh, rules, shard_optimizer: bool = False):
    """NamedShardings of the state from the logical axes of `abstract_state`; with
    `shard_optimizer` (ZeRO-1) the optimizer state is split over the data-parallel axes
    as well (`over_data`), so each data-parallel device keeps and updates 1/N of it."""
    shardings = fitted(sharding.logical_to_sharding(nn.get_partition_spec(abstract), mesh,
                                                    rules), nn.unbox(abstract))
    if not shard_optimizer:
        return shardings
    return shardings.replace(opt_state=over_data(
        shardings.opt_state, nn.unbox(abstract).opt_state, mesh, rules))


def fitted(shardings, shapes):
    """Each NamedSharding with the mesh axes dropped from a dimension they do not divide
    (replicated there instead): one key/value head (Gemma 3's) under tensor
    parallelism of 2 is kept whole on each device, as MaxText replicates such heads,
    where an uneven split is refused by jax."""
    def fit(named, shape):
        if not isinstance(named, NamedSharding) or not hasattr(shape, "shape"):
            return named
        spec = list(named.spec) + [None] * (len(shape.shape) - len(named.spec))
        for i, (axes, size) in enumerate(zip(spec, shape.shape)):
            names = axes if isinstance(axes, tuple) else (axes,) if axes else ()
            if names and size % int(np.prod([named.mesh.shape[a] for a in names])):
                spec[i] = None
        return NamedSharding(named.mesh, P(*spec))
    return jax.tree_util.tree_map(fit, shardings, shapes,
                                  is_leaf=lambda x: isinstance(x, NamedSharding))


def zero_of(abstract, shardings, mesh, rules, shard_optimizer: bool):
    """make_train_step's `zero`: (the parameters' shardings, the same split over the
    data-parallel axes), or None without mesh.shard_optimizer."""
    if not shard_optimizer:
        return None
    return shardings.params, over_data(shardings.params, nn.unbox(abstract).params, mesh,
                                       rules)


def over_data(shardings, shapes, mesh, rules):
    """Each NamedSharding of `shardings` with the data-parallel mesh axes it does not
    already use added to the first dimension of its leaf in `shapes` that they divide
    evenly (the leading one, where the slices stay contiguous: choosing the largest
    slice instead cost BERT-Base on v5e 1 ms more of layout copies). A leaf they divide
    nowhere (a count, a scalar, an odd bias) keeps its sharding: it is small."""
    spec = nn.logical_to_mesh_axes(("batch",), rules)[0]
    data_axes = tuple(a for a in (spec if isinstance(spec, tuple) else (spec,))
                      if a is not None and mesh.shape[a] > 1)

    def axes_of(entry):
        return () if entry is None else entry if isinstance(entry, tuple) else (entry,)

    def size_of(axes):
        return int(np.prod([mesh.shape[a] for a in axes]))

    def one(named, leaf):
        entries = list(named.spec) + [None] * (len(leaf.shape) - len(named.spec))
        extra = tuple(a for a in data_axes if all(a not in axes_of(e) for e in entries))
        for i, dim in enumerate(leaf.shape if extra else ()):
            if dim % (size_of(axes_of(entries[i])) * size_of(extra)) == 0:
                entries[i] = axes_of(entries[i]) + extra
                return NamedSharding(mesh, P(*entries))
        return named

    return jax.tree_util.tree_map(one, shardings, shapes)


def count_params(abstract) -> int:
    params = nn.unbox(abstract.params) if hasattr(abstract, "params") else nn.unbox(abstract)
    return int(sum(x.size for x in jax.tree_util.tree_leaves(params)))


def count_frozen(abstract, frozen: tuple) -> int:
    """Of count_params, those under the `frozen` paths (objective.frozen: a distillation's
    teacher, the layers its stage leaves), which the run carries but never trains."""
    flat = traverse_util.flatten_dict(nn.unbox(abstract.params))
    return int(sum(x.size for path, x in flat.items()
                   if any(path[:len(f)] == tuple(f) for f in frozen)))


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
