"""Parameter-efficient tuning: which new parameters a method adds, and which train.

A `Peft` is the part a family hands its blocks: `layers.Dense` adds LoRA where
`lora_on` names it, `mha.MultiHeadAttention` adds the prefix (`with_prefix`),
a layer adds adapters and an encoder prompts. This module also labels every
parameter `train` or `freeze` for the optimizer, so the frozen base has no
optimizer state at all.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn

from pretrainx.errors import UserError
from pretrainx.models import layers

METHODS = ("none", "lora", "adapter", "prefix", "prompt")
LORA_TARGETS = ("query", "key", "value", "out", "wi", "wo")


@dataclasses.dataclass(frozen=True)
class Peft:
    method: str = "none"
    lora: layers.Lora | None = None
    lora_targets: tuple = ()
    adapter_size: int = 0
    num_virtual_tokens: int = 0  # prompt tokens, or prefix length per layer

    @property
    def prefix_length(self) -> int:
        return self.num_virtual_tokens if self.method == "prefix" else 0

    @property
    def prompt_length(self) -> int:
        return self.num_virtual_tokens if self.method == "prompt" else 0

    def lora_on(self, projection: str) -> layers.Lora | None:
        """The LoRA update of `projection` (query, key, value, out, wi, wo), if any."""
        return self.lora if projection in self.lora_targets else None


def with_prefix(module: nn.Module, k, v, bias, length: int, dtype):
    """Prefix-tuning (Li & Liang 2021): `length` learned keys and values (parameters of
    the attention `module`) in front of the sequence's [batch, length, heads, kv], open
    to every query; parametrised directly (as P-tuning v2) rather than through an MLP."""
    shape = (length,) + k.shape[2:]
    init = nn.with_logical_partitioning(layers.truncated_normal(0.02), ("prefix", "heads", "kv"))
    pk = module.param("prefix_key", init, shape, jnp.float32).astype(dtype)
    pv = module.param("prefix_value", init, shape, jnp.float32).astype(dtype)
    batch = k.shape[0]
    k = jnp.concatenate([jnp.broadcast_to(pk, (batch,) + shape), k], axis=1)
    v = jnp.concatenate([jnp.broadcast_to(pv, (batch,) + shape), v], axis=1)
    open_bias = jnp.zeros(bias.shape[:-1] + (length,), bias.dtype)
    return k, v, jnp.concatenate([open_bias, bias], axis=-1)


def from_config(c) -> Peft:
    """A Peft from a config's `peft` section, refusing what would not train."""
    if c.method not in METHODS:
        raise UserError(f"config key 'peft.method' is {c.method!r}; expected one of "
                        f"{', '.join(METHODS)}")
    if c.method == "none":
        return Peft()
    if c.method == "lora":
        targets = tuple(t.strip() for t in c.lora_targets.split(",") if t.strip())
        bad = [t for t in targets if t not in LORA_TARGETS]
        if bad or not targets:
            raise UserError(f"peft.lora_targets={c.lora_targets!r}: expected a comma-separated "
                            f"subset of {', '.join(LORA_TARGETS)}")
        if c.lora_rank <= 0:
            raise UserError(f"peft.lora_rank={c.lora_rank} must be positive")
        return Peft("lora", layers.Lora(int(c.lora_rank), float(c.lora_alpha),
                                        float(c.lora_dropout)), targets)
    if c.method == "adapter":
        if c.adapter_size <= 0:
            raise UserError(f"peft.adapter_size={c.adapter_size} must be positive")
        return Peft("adapter", adapter_size=int(c.adapter_size))
    if c.num_virtual_tokens <= 0:
        raise UserError(f"peft.num_virtual_tokens={c.num_virtual_tokens} must be positive")
    return Peft(c.method, num_virtual_tokens=int(c.num_virtual_tokens))


class Adapter(nn.Module):
    """Houlsby et al. (2019): x + up(gelu(down(x))) with a small bottleneck. The up
    projection starts at zero, so an adapted model starts as the pretrained one."""
    size: int
    dtype: jnp.dtype

    @nn.compact
    def __call__(self, x):
        h = layers.Dense(self.size, ("embed", "adapter"), dtype=self.dtype,
                         kernel_init=layers.truncated_normal(1e-3), name="down")(x)
        h = layers.activation("gelu")(h)
        return x + layers.Dense(x.shape[-1], ("adapter", "embed"), dtype=self.dtype,
                                kernel_init=nn.initializers.zeros, name="up")(h)


_NEW_PARAMS = ("lora_a", "lora_b", "prefix_key", "prefix_value", "prompt")


def added_by_a_method(names) -> bool:
    """True for a parameter (its path of names) that a peft method adds to the base."""
    return any(n in _NEW_PARAMS or n.endswith("adapter") for n in names)


def _names(path):
    return [str(getattr(k, "key", getattr(k, "name", k))) for k in path]


def trainable_labels(params, peft: Peft, head_modules: tuple):
    """'train' or 'freeze' per parameter: with a method, only what it adds and the
    task head (plus, for adapters, the layer norms, as Houlsby et al. train them)."""
    def label(path, _):
        names = _names(path)
        if peft.method == "none" or (names and names[0] in head_modules):
            return "train"
        if added_by_a_method(names):
            return "train"
        if peft.method == "adapter" and any(n.endswith("norm") for n in names):
            return "train"
        return "freeze"
    return jax.tree_util.tree_map_with_path(label, params)


def count(params, labels=None, which: str = "train") -> int:
    sizes = [int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(params)]
    if labels is None:
        return sum(sizes)
    return sum(n for n, lab in zip(sizes, jax.tree_util.tree_leaves(labels)) if lab == which)


def merge_lora(params, lora: layers.Lora):
    """The same function as plain kernels: W + (alpha / rank) A B, LoRA leaves removed,
    so the merged model exports and serves as the base architecture."""
    def merge(tree):
        if not isinstance(tree, dict):
            return tree
        tree = {k: merge(v) for k, v in tree.items()}
        if "lora_a" in tree:
            a, b = tree.pop("lora_a"), tree.pop("lora_b")
            kernel = tree["kernel"]
            tree["kernel"] = kernel + (lora.alpha / lora.rank) * _low_rank_product(
                a, b, kernel.shape)
        return tree
    return merge(params)


def _low_rank_product(a, b, kernel_shape):
    """A B in the kernel's shape; a leading `layers` axis (scanned stacks) batches."""
    r = a.shape[-1]
    lead = kernel_shape[:a.ndim + b.ndim - 2 - len(kernel_shape)]
    flat_a = a.reshape(lead + (-1, r))
    flat_b = b.reshape(lead + (r, -1))
    return (flat_a @ flat_b).reshape(kernel_shape)
