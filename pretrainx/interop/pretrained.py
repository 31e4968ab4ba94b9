"""`Pretrained`: a model as every loader returns it (our model keys, float32 numpy
parameters with layers unrolled, the tokenizer), and the tree surgery around it:
unrolling scanned layers, and grafting its tensors into a freshly initialised model."""

import dataclasses
import json

import jax
import ml_collections
import numpy as np

from pretrainx.errors import UserError


def read_json(path: str) -> dict:
    """A JSON file of a model directory, or one line naming it and what is wrong."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read {path}: {e}") from None


@dataclasses.dataclass
class Pretrained:
    model: ml_collections.ConfigDict  # our model.* keys
    params: dict  # float32 numpy, layers unrolled (layer_0, layer_1, ...)
    tokenizer: str  # path of vocab.txt or a SentencePiece .model
    lower_case: bool
    head: str  # pretrain | classify | tokens | span | encoder (BERT); seq2seq (T5); causal_lm
    source: str
    labels: tuple | None = None  # a fine-tuned head's labels (() for regression)
    task: str | None = None
    peft: dict | None = None  # a fine-tuning run's peft section
    num_sentinels: int = 0  # T5: the <extra_id_N> ids past the SentencePiece pieces
    # What the run that made it recorded, for the export's model card (interop/
    # model_card.py): objective or task, steps, tokens, data, eval; None: not our run
    run: dict | None = None

    @property
    def family(self) -> str:
        return self.model.family


_STACKS = ("layers", "encoders", "decoders")  # scan_layers' stacked subtrees


def _groups_from(key: str):
    """N of a `layers_from_N` key: scanned groups of layers (sub_0, sub_1, ...) from
    layer N on (ModernBERT's global + local layers), else None."""
    head, _, start = key.rpartition("_")
    return int(start) if head == "layers_from" and start.isdigit() else None


def unstack_layers(params: dict) -> dict:
    """scan_layers' stacked `layers` subtree -> layer_0, layer_1, ... (anywhere in the
    tree); a `layers_from_N` stack of groups -> layer_N, layer_N+1, ... in group order."""
    out = {}
    for key, value in params.items():
        start = _groups_from(key)
        if start is not None and isinstance(value, dict):
            size = len(value)  # layers a group: sub_0 .. sub_{size-1}
            n = jax.tree_util.tree_leaves(value)[0].shape[0]
            for g in range(n):
                for j in range(size):
                    out[f"layer_{start + g * size + j}"] = jax.tree_util.tree_map(
                        lambda x, g=g: x[g], value[f"sub_{j}"])
        elif key in _STACKS and isinstance(value, dict):
            n = jax.tree_util.tree_leaves(value)[0].shape[0]
            prefix = key[:-1]
            for i in range(n):
                out[f"{prefix}_{i}"] = jax.tree_util.tree_map(lambda x, i=i: x[i], value)
        elif isinstance(value, dict):
            out[key] = unstack_layers(value)
        else:
            out[key] = value
    return out


def stack_layers(params: dict, like: dict) -> dict:
    """The inverse of `unstack_layers`, shaped as `like` (a scanned model's params)."""
    out = {}
    for key, value in like.items():
        start = _groups_from(key)
        if start is not None and isinstance(value, dict):
            size = len(value)
            n = jax.tree_util.tree_leaves(value)[0].shape[0]
            out[key] = {f"sub_{j}": jax.tree_util.tree_map(
                lambda *xs: np.stack(xs),
                *[params[f"layer_{start + g * size + j}"] for g in range(n)])
                for j in range(size)}
        elif key in _STACKS and isinstance(value, dict):
            prefix = key[:-1]
            n = jax.tree_util.tree_leaves(value)[0].shape[0]
            parts = [params[f"{prefix}_{i}"] for i in range(n)]
            out[key] = jax.tree_util.tree_map(lambda *xs: np.stack(xs), *parts)
        elif isinstance(value, dict):
            out[key] = stack_layers(params.get(key, {}), value)
        elif key in params:
            out[key] = params[key]
    return out


def to_numpy(tree):
    return jax.tree_util.tree_map(lambda x: np.asarray(x, np.float32), tree)


def graft(fresh: dict, pretrained: Pretrained, keep_fresh=lambda path: False,
          may_be_missing=lambda path: False) -> tuple:
    """`fresh` (a model's initialised parameters, numpy) with `pretrained`'s tensors put
    in their places, except where `keep_fresh(path)`. A tensor `pretrained` lacks must
    be one `may_be_missing(path)` allows; a shape that differs is refused, naming the
    tensor, the source and both shapes. Returns (params, tensors taken, fresh names)."""
    taken, new = 0, []

    def walk(target, have, path):
        nonlocal taken
        out = {}
        for key, value in target.items():
            here = path + (key,)
            if isinstance(value, dict):
                out[key] = walk(value, have.get(key, {}) if isinstance(have, dict) else {}, here)
                continue
            name = "/".join(here)
            if keep_fresh(here) or key not in have:
                if key not in have and not (keep_fresh(here) or may_be_missing(here)):
                    raise UserError(f"{pretrained.source}: no parameter {name} for this model")
                new.append(name)
                out[key] = value
                continue
            if tuple(have[key].shape) != tuple(value.shape):
                raise UserError(f"{pretrained.source}: parameter {name} has shape "
                                f"{tuple(have[key].shape)}, the config expects "
                                f"{tuple(value.shape)}")
            out[key] = np.asarray(have[key], value.dtype)
            taken += 1
        return out

    return walk(fresh, pretrained.params, ()), taken, new
