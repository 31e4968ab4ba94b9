"""One attention dispatch for every family, chosen by `model.attention_impl`.

- "xla": einsums and a softmax over a dense additive bias (the reference, and what CPU
  runs; attention dropout and the probabilities distillation reads live only here);
- "flash": Pallas's TPU flash attention (`jax.experimental.pallas.ops.tpu`), which takes
  segment ids, a causal flag and an additive bias (T5's relative positions);
- "splash": Pallas's TPU splash attention: segment ids and a causal mask, no bias;
- "cudnn": `jax.nn.dot_product_attention(implementation="cudnn")` on NVIDIA GPUs;
- "auto": splash on TPU (flash when a bias is needed), cudnn on GPU, xla elsewhere or
  when attention dropout is on.

A `Mask` says which keys a query may see (the same nonzero segment, and with `causal` no
later one), so that a kernel gets segment ids where XLA gets a bias: packed examples stay
isolated either way. Padding queries (segment 0) are the one difference: XLA lets them see
nothing, the kernels let them see other padding; their outputs carry no loss and no real
query reads them. On CPU the Pallas kernels run only inside
`jax.experimental.pallas.tpu.force_tpu_interpret_mode()` (how the tests prove them).
"""

import contextlib
import functools
from typing import NamedTuple

import flax.struct
import jax
import jax.numpy as jnp
from flax import linen as nn
from jax.sharding import PartitionSpec as P

from pretrainx.errors import UserError
from pretrainx.models import target

IMPLS = ("xla", "flash", "splash", "cudnn", "auto")
KERNELS = ("flash", "splash", "cudnn")
_BLOCK = 128  # the TPU kernels' tile along a sequence (others are padded up to it)


def segment_mask(q_segments, kv_segments, causal: bool = False, window: int = 0,
                 kv_prefix=None):
    """Boolean [batch, 1, q, kv]: True where attention is allowed.

    Segment id 0 is padding. Tokens attend only inside their own segment, which is
    what keeps packed examples (and padding) from seeing each other. `window` > 0: only
    keys at most `window` places away on either side (ModernBERT's local layers).
    `kv_prefix` (bool [batch, kv], with causal): keys every query of their segment sees,
    a PrefixLM's prefix, bidirectional inside and visible to what follows.
    """
    mask = (q_segments[:, :, None] == kv_segments[:, None, :]) & (kv_segments[:, None, :] != 0)
    q_len, kv_len = q_segments.shape[1], kv_segments.shape[1]
    offset = jnp.arange(q_len)[:, None] - jnp.arange(kv_len)[None, :]
    if causal:
        seen = offset >= 0
        mask = mask & (seen if kv_prefix is None else seen | kv_prefix[:, None, :])
    if window:
        mask = mask & (jnp.abs(offset) <= window)
    return mask[:, None, :, :]


def prefix_of(batch):
    """A PrefixLM batch's bool [batch, length] prefix (its `prefix` feature), else None."""
    return batch["prefix"] > 0 if "prefix" in batch else None


def mask_to_bias(mask, dtype):
    """Additive bias: 0 where allowed, a large negative where not. It stays finite
    after scores are added (half the dtype's range: float16's -65504 plus a score would
    round to -inf and a fully masked row to NaN), so rows of padding stay NaN-free."""
    big_negative = jnp.asarray(0.5 * float(jnp.finfo(dtype).min) if dtype != jnp.float32
                               else -1e9, dtype)
    return jnp.where(mask, jnp.asarray(0, dtype), big_negative)


@jax.custom_vjp
def plus_shared(shared, per_row):
    """shared [1, ...] + per_row [batch, ...], whose gradient for `shared` (T5's position
    bias, one for the whole batch and every layer) sums over the batch as a
    matrix-vector product: XLA:CPU's reduction over a leading axis ran at a tenth of
    memory speed, 10% of T5-small's step."""
    return shared + per_row


def _plus_shared_fwd(shared, per_row):
    return shared + per_row, (shared.shape, per_row.shape)


def _summed_to(g, shape):
    """g summed over the axes that `shape` broadcasts (size 1 there), the leading one
    by a product with a vector of ones."""
    if shape[0] == 1 and g.shape[0] != 1:
        g = jnp.tensordot(jnp.ones((g.shape[0],), g.dtype), g, axes=1)[None]
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    return g.sum(axes, keepdims=True) if axes else g


def _plus_shared_bwd(shapes, g):
    return _summed_to(g, shapes[0]), _summed_to(g, shapes[1])


plus_shared.defvjp(_plus_shared_fwd, _plus_shared_bwd)


@flax.struct.dataclass
class Mask:
    q_segments: jax.Array  # [batch, q], 0 = padding
    kv_segments: jax.Array  # [batch, kv]
    causal: bool = flax.struct.field(pytree_node=False, default=False)
    extra: jax.Array | None = None  # additive [1 or batch, heads, q, kv] (T5's positions)
    # > 0: a sliding window, keys at most this far on either side (ModernBERT's local layers)
    window: int = flax.struct.field(pytree_node=False, default=0)
    kv_prefix: jax.Array | None = None  # bool [batch, kv]: a PrefixLM's prefix (causal)

    def dense(self, dtype):
        """The additive bias XLA's path adds to the scores."""
        allowed = segment_mask(self.q_segments, self.kv_segments, self.causal, self.window,
                               self.kv_prefix)
        bias = mask_to_bias(allowed, dtype)
        return bias if self.extra is None else plus_shared(self.extra, bias)


def choose(impl: str, has_bias: bool, dropout: bool, dtype=jnp.float32) -> str:
    """The implementation "auto" stands for on this backend and shape; others as
    given. XLA wherever a kernel would drop attention dropout, and on GPUs above 16
    bits (cuDNN's fused attention needs bf16 or fp16). (A sliding window never needs a
    bias, so on a TPU it is splash's.)"""
    if impl != "auto":
        return impl
    where = target.backend()
    if dropout or where not in ("tpu", "gpu"):
        return "xla"
    if where == "gpu":
        return "cudnn" if jnp.dtype(dtype).itemsize == 2 else "xla"
    return "flash" if has_bias else "splash"


_RUNS_ON = {"flash": "tpu", "splash": "tpu", "cudnn": "gpu"}


def attention_dropout_key(model_cfg) -> str:
    """The key of a family's attention dropout: its own, or the one rate a family
    without it (T5) applies everywhere, attention probabilities included."""
    return "attention_dropout_rate" if "attention_dropout_rate" in model_cfg else "dropout_rate"


def validate(model_cfg) -> None:
    """Refuse, naming the key, what a kernel cannot do: another backend's kernel,
    attention dropout, a head size cuDNN lacks. (Any length works: `attend` pads.)"""
    impl = model_cfg.get("attention_impl", "xla")
    key = "model.attention_impl"
    if impl not in IMPLS:
        raise UserError(f"config key '{key}' is {impl!r}; expected one of {', '.join(IMPLS)}")
    if impl not in KERNELS:
        return
    if _RUNS_ON[impl] != target.backend() and not _interpreting():
        raise UserError(f"{key}={impl} runs on {_RUNS_ON[impl].upper()}s; this run's backend "
                        f"is {target.backend()} (use xla, or auto to pick per backend)")
    rate_key = attention_dropout_key(model_cfg)
    if model_cfg.get(rate_key, 0.0) > 0:
        raise UserError(f"{key}={impl} applies no dropout to attention probabilities; set "
                        f"model.{rate_key}=0 (it is {model_cfg[rate_key]}) or use xla / auto")
    head_dim = model_cfg.get("head_dim", 0) or (
        model_cfg.hidden_size // model_cfg.num_heads if "num_heads" in model_cfg else 0)
    if impl == "cudnn" and head_dim and (head_dim % 8 or head_dim > 256):
        raise UserError(f"{key}=cudnn needs a head dimension that is a multiple of 8 and "
                        f"at most 256 (128 before Hopper); this model's is {head_dim}")


class KernelCall(NamedTuple):
    """One attention kernel in a traced step (global shapes), for the planner: a
    compiler's cost model cannot see inside a Mosaic kernel."""
    impl: str
    batch: int
    heads: int
    q_len: int
    kv_len: int
    head_dim: int
    causal: bool
    itemsize: int
    window: int = 0  # a sliding window (splash skips the key blocks outside it)


_recording: list | None = None


@contextlib.contextmanager
def recording():
    """{caller's module path: KernelCall} of the kernels traced inside; a path traced
    again (remat, an eval_shape of the step) is one call."""
    global _recording
    outer, _recording = _recording, {}
    try:
        yield _recording
    finally:
        _recording = outer


def attend(impl: str, q, k, v, mask: Mask, where: tuple = ()):
    """[batch, heads, q, head_dim] outputs of a kernel; q already scaled. `where` (the
    calling module's path) names the call for `recording`."""
    if mask.kv_prefix is not None:
        raise ValueError(f"attention_impl={impl} has no PrefixLM mask (a bidirectional "
                         "prefix): use model.attention_impl=xla or auto")
    if _recording is not None:
        _recording[where] = KernelCall(impl, q.shape[0], q.shape[1], q.shape[2], k.shape[2],
                                       q.shape[3], mask.causal, q.dtype.itemsize, mask.window)
    if impl == "flash":
        if mask.window:
            raise ValueError("flash attention has no sliding window (ModernBERT's local "
                             "layers): use model.attention_impl=splash or auto")
        kernel = _flash
    elif impl == "splash":
        if mask.extra is not None:
            raise ValueError("splash attention takes no additive bias (T5's relative "
                             "positions): use model.attention_impl=flash")
        kernel = _splash
    elif impl == "cudnn":
        return _fused(q, k, v, mask, "cudnn")  # XLA partitions its custom call itself
    else:
        raise ValueError(f"no attention kernel {impl!r}")
    return _per_shard(kernel, q, k, v, mask)


def _per_shard(kernel, q, k, v, mask: Mask):
    """A Mosaic kernel under the run's mesh: XLA cannot partition it, so each device
    runs it on its own rows (the batch's axes) and heads (tensor parallelism)."""
    mesh = jax.sharding.get_abstract_mesh()
    kernel = functools.partial(_padded, kernel)
    if mesh.empty or mesh.size == 1:
        return kernel(q, k, v, mask)
    batch, heads = nn.logical_to_mesh_axes(("batch", "heads"))
    qkv, rows = P(batch, heads, None, None), P(batch, None)
    extra = None if mask.extra is None else P(
        batch if mask.extra.shape[0] > 1 else None, heads, None, None)
    specs = Mask(rows, rows, causal=mask.causal, extra=extra, window=mask.window)
    return jax.shard_map(kernel, mesh=mesh, in_specs=(qkv, qkv, qkv, specs), out_specs=qkv,
                         check_vma=False)(q, k, v, mask)


def _padded(kernel, q, k, v, mask: Mask):
    """The TPU kernels tile sequences by 128 (a block must be a multiple of it): pad
    both sides up to one, as padding (segment 0), which no real query sees; the
    padded queries' outputs are dropped."""
    q_len, kv_len = q.shape[2], k.shape[2]
    q_pad, kv_pad = -q_len % _BLOCK, -kv_len % _BLOCK
    if not q_pad and not kv_pad:
        return kernel(q, k, v, mask)
    seq = lambda x, n: jnp.pad(x, [(0, 0)] * (x.ndim - 2) + [(0, n), (0, 0)])  # noqa: E731
    rows = lambda x, n: jnp.pad(x, [(0, 0), (0, n)])  # noqa: E731
    extra = None if mask.extra is None else jnp.pad(
        mask.extra, [(0, 0), (0, 0), (0, q_pad), (0, kv_pad)])
    padded = Mask(rows(mask.q_segments, q_pad), rows(mask.kv_segments, kv_pad),
                  causal=mask.causal, extra=extra, window=mask.window)
    out = kernel(seq(q, q_pad), seq(k, kv_pad), seq(v, kv_pad), padded)
    return out[:, :, :q_len]


def _flash(q, k, v, mask: Mask):
    from jax.experimental.pallas.ops.tpu import flash_attention as fa
    bq, bk = _BLOCK, _BLOCK
    blocks = fa.BlockSizes(block_q=bq, block_k_major=bk, block_k=bk, block_b=1,
                           block_q_major_dkv=bq, block_k_major_dkv=bk, block_k_dkv=bk,
                           block_q_dkv=bq, block_k_major_dq=bk, block_k_dq=bk, block_q_dq=bq)
    ab = None
    if mask.extra is not None:
        ab = jnp.broadcast_to(mask.extra, q.shape[:2] + (q.shape[2], k.shape[2])).astype(q.dtype)
    return fa.flash_attention(q, k, v, ab=ab,
                              segment_ids=fa.SegmentIds(mask.q_segments, mask.kv_segments),
                              causal=mask.causal, sm_scale=1.0, block_sizes=blocks)


def _splash(q, k, v, mask: Mask):
    from jax.experimental.pallas.ops.tpu import splash_attention as sa
    heads, q_len, kv_len = q.shape[1], q.shape[2], k.shape[2]
    bq, bk = _BLOCK, _BLOCK
    blocks = sa.BlockSizes(block_q=bq, block_kv=bk, block_kv_compute=bk, block_q_dkv=bq,
                           block_kv_dkv=bk, block_kv_dkv_compute=bk, block_q_dq=bq,
                           block_kv_dq=bk)
    shape = (q_len, kv_len)
    if mask.window:  # keys within `window` on either side (and none later if causal)
        one = sa.LocalMask(shape, (mask.window, 0 if mask.causal else mask.window), offset=0)
    else:
        one = sa.CausalMask(shape) if mask.causal else sa.FullMask(shape)
    kernel = sa.make_splash_mha(sa.MultiHeadMask([one] * heads), block_sizes=blocks,
                                head_shards=1, q_seq_shards=1)
    segments = sa.SegmentIds(mask.q_segments, mask.kv_segments)
    one_row = lambda a: kernel(a[0], a[1], a[2], segment_ids=a[3])  # noqa: E731
    if _interpreting():  # jax 0.10's TPU interpreter cannot batch the kernel's grid
        return jax.lax.map(one_row, (q, k, v, segments))
    return jax.vmap(lambda *a: one_row(a))(q, k, v, segments)


def _interpreting() -> bool:
    """Inside `pltpu.force_tpu_interpret_mode()`: the kernels run on CPU (the tests)."""
    from jax._src import config  # the flag that context manager sets has no public getter
    flag = getattr(config, "pallas_tpu_interpret_mode_context_manager", None)
    return flag is not None and flag.value is not None


def _fused(q, k, v, mask: Mask, implementation):
    """jax.nn.dot_product_attention in its [batch, length, heads, head_dim] layout; the
    mask as a boolean (cuDNN takes it as a bias), T5's positions as the bias."""
    swap = lambda x: jnp.swapaxes(x, 1, 2)  # noqa: E731
    allowed = segment_mask(mask.q_segments, mask.kv_segments, mask.causal, mask.window)
    bias = None if mask.extra is None else mask.extra.astype(q.dtype)
    out = jax.nn.dot_product_attention(swap(q), swap(k), swap(v), bias=bias, mask=allowed,
                                       scale=1.0, implementation=implementation)
    return swap(out)
