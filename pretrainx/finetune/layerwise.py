"""ULMFiT's fine-tuning methods (Howard and Ruder 2018) as per-parameter trees for
`train.optim.layerwise`: discriminative learning rates (a factor per layer, as ELECTRA
and DeBERTa fine-tune with layer_lr_decay 0.8-0.9) and gradual unfreezing.

A parameter's depth comes from its path, by the names every family's modules use:
the task head and pooler are the top; a `layer_N` (`encoder_N`, then `decoder_N` above
the encoder's, ALBERT's one shared `layer_shared`) is depth N + 1 in its stack; the
rest (token, position and type embeddings, their norms, shared relative-position
tables, T5's final norms) is depth 0, with the embeddings.
"""

import re

import jax
import numpy as np

_STACK = re.compile(r"^(layer|encoder|decoder)_(\d+|shared)$")
_ORDER = {"layer": 0, "encoder": 0, "decoder": 1}  # a decoder sits above its encoder


def _names(path) -> tuple:
    return tuple(k.key for k in path if isinstance(k, jax.tree_util.DictKey))


def _stack_position(names):
    """(stack order, layer index) of the first `layer_N` / `encoder_N` / `decoder_N`
    name on a path, or None outside the layer stacks."""
    for name in names:
        m = _STACK.match(name)
        if m:
            return _ORDER[m.group(1)], 0 if m.group(2) == "shared" else int(m.group(2))
    return None


def depths(params, head_modules: tuple) -> tuple:
    """(tree of ints, top): every parameter's depth, embeddings 0 and the head `top`."""
    paths = [_names(path) for path, _ in jax.tree_util.tree_flatten_with_path(params)[0]]
    found = {}
    for position in filter(None, map(_stack_position, paths)):
        order, index = position
        found[order] = max(found.get(order, 0), index + 1)
    offsets = {0: 0, 1: found.get(0, 0)}
    top = sum(found.values()) + 1

    def depth(path, _):
        names = _names(path)
        if names and (names[0] in head_modules or names[0] == "pooler"):
            return top
        position = _stack_position(names)
        return 0 if position is None else offsets[position[0]] + position[1] + 1

    return jax.tree_util.tree_map_with_path(depth, params), top


def learning_rate_scales(depth_tree, top: int, decay: float):
    """decay^(top - depth): the head at the full rate, each layer below it `decay` times
    its upper neighbour's, the embeddings at decay^top."""
    return jax.tree_util.tree_map(lambda d: float(decay ** (top - d)), depth_tree)


def unfreeze_steps(depth_tree, top: int, steps_per_epoch: int, gradual: bool):
    """The step from which each parameter trains: with gradual unfreezing the head from
    step 0, the layer below it from the second epoch, and so on down (the embeddings
    last); without, every parameter from step 0."""
    return jax.tree_util.tree_map(
        lambda d: np.int32((top - d) * steps_per_epoch if gradual else 0), depth_tree)
