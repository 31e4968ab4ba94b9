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

import flax.struct
import jax
import jax.numpy as jnp

from pretrainx.errors import UserError

IMPLS = ("xla", "flash", "splash", "cudnn", "auto")
KERNELS = ("flash", "splash", "cudnn")
_BLOCK = 128  # the kernels' tile along a sequence (shorter sequences: one tile)


def segment_mask(q_segments, kv_segments, causal: bool = False):
    """Boolean [batch, 1, q, kv]: True where attention is allowed.

    Segment id 0 is padding. Tokens attend only inside their own segment, which is
    what keeps packed examples (and padding) from seeing each other.
    """
    mask = (q_segments[:, :, None] == kv_segments[:, None, :]) & (kv_segments[:, None, :] != 0)
    if causal:
        q_len, kv_len = q_segments.shape[1], kv_segments.shape[1]
        mask = mask & (jnp.arange(q_len)[:, None] >= jnp.arange(kv_len)[None, :])
    return mask[:, None, :, :]


def mask_to_bias(mask, dtype):
    """Additive bias: 0 where allowed, a large negative where not. It stays finite
    after scores are added (half the dtype's range: float16's -65504 plus a score would
    round to -inf and a fully masked row to NaN), so rows of padding stay NaN-free."""
    big_negative = jnp.asarray(0.5 * float(jnp.finfo(dtype).min) if dtype != jnp.float32
                               else -1e9, dtype)
    return jnp.where(mask, jnp.asarray(0, dtype), big_negative)


@flax.struct.dataclass
class Mask:
    q_segments: jax.Array  # [batch, q], 0 = padding
    kv_segments: jax.Array  # [batch, kv]
    causal: bool = flax.struct.field(pytree_node=False, default=False)
    extra: jax.Array | None = None  # additive [1 or batch, heads, q, kv] (T5's positions)

    def dense(self, dtype):
        """The additive bias XLA's path adds to the scores."""
        bias = mask_to_bias(segment_mask(self.q_segments, self.kv_segments, self.causal), dtype)
        return bias if self.extra is None else self.extra + bias


def choose(impl: str, has_bias: bool, dropout: bool) -> str:
    """The implementation "auto" stands for on this backend; others as given."""
    if impl != "auto":
        return impl
    backend = jax.default_backend()
    if dropout or backend not in ("tpu", "gpu"):
        return "xla"
    if backend == "gpu":
        return "cudnn"
    return "flash" if has_bias else "splash"


def validate(model_cfg) -> None:
    """Refuse, naming the key, what a kernel cannot do."""
    impl = model_cfg.get("attention_impl", "xla")
    if impl not in IMPLS:
        raise UserError(f"config key 'model.attention_impl' is {impl!r}; expected one of "
                        f"{', '.join(IMPLS)}")
    if impl in KERNELS and model_cfg.get("attention_dropout_rate", 0.0) > 0:
        raise UserError(f"model.attention_impl={impl} applies no dropout to attention "
                        f"probabilities; set model.attention_dropout_rate=0 (it is "
                        f"{model_cfg.attention_dropout_rate}) or use xla / auto")


def attend(impl: str, q, k, v, mask: Mask):
    """[batch, heads, q, head_dim] outputs of a kernel; q already scaled."""
    if impl == "flash":
        return _flash(q, k, v, mask)
    if impl == "splash":
        if mask.extra is not None:
            raise ValueError("splash attention takes no additive bias (T5's relative "
                             "positions): use model.attention_impl=flash")
        return _splash(q, k, v, mask)
    if impl == "cudnn":
        return _fused(q, k, v, mask, "cudnn")
    raise ValueError(f"no attention kernel {impl!r}")


def _tiles(q_len: int, kv_len: int):
    bq, bk = min(_BLOCK, q_len), min(_BLOCK, kv_len)
    if q_len % bq or kv_len % bk:
        raise ValueError(f"attention kernels tile sequences by {_BLOCK}: lengths {q_len} "
                         f"and {kv_len} must be multiples of it (or shorter)")
    return bq, bk


def _flash(q, k, v, mask: Mask):
    from jax.experimental.pallas.ops.tpu import flash_attention as fa
    bq, bk = _tiles(q.shape[2], k.shape[2])
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
    bq, bk = _tiles(q_len, kv_len)
    blocks = sa.BlockSizes(block_q=bq, block_kv=bk, block_kv_compute=bk, block_q_dkv=bq,
                           block_kv_dkv=bk, block_kv_dkv_compute=bk, block_q_dq=bq,
                           block_kv_dq=bk)
    shape = (q_len, kv_len)
    one = sa.CausalMask(shape) if mask.causal else sa.FullMask(shape)
    kernel = sa.make_splash_mha(sa.MultiHeadMask([one] * heads), block_sizes=blocks,
                                head_shards=1, q_seq_shards=1)
    segments = sa.SegmentIds(mask.q_segments, mask.kv_segments)
    return jax.vmap(lambda a, b, c, s: kernel(a, b, c, segment_ids=s))(q, k, v, segments)


def _fused(q, k, v, mask: Mask, implementation):
    """jax.nn.dot_product_attention in its [batch, length, heads, head_dim] layout; the
    mask as a boolean (cuDNN takes it as a bias), T5's positions as the bias."""
    swap = lambda x: jnp.swapaxes(x, 1, 2)  # noqa: E731
    allowed = segment_mask(mask.q_segments, mask.kv_segments, mask.causal)
    bias = None if mask.extra is None else mask.extra.astype(q.dtype)
    out = jax.nn.dot_product_attention(swap(q), swap(k), swap(v), bias=bias, mask=allowed,
                                       scale=1.0, implementation=implementation)
    return swap(out)
