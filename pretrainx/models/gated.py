"""The gated feed-forward block (Shazeer 2020, "GLU variants improve Transformer"): what
ModernBERT and the crammed BERT put where BERT has dense + GeLU + dense."""

import jax.numpy as jnp
from flax import linen as nn

from pretrainx.models import layers


class GatedMlp(nn.Module):
    """GeGLU: wo(dropout(act(x wi[0]) * x wi[1])), one fused input projection."""
    mlp_dim: int
    act: str
    dropout_rate: float
    dtype: jnp.dtype
    kernel_init: object
    out_init: object

    @nn.compact
    def __call__(self, x, deterministic: bool):
        h = layers.Dense(features=(2, self.mlp_dim), kernel_axes=("embed", None, "mlp"),
                         use_bias=False, dtype=self.dtype, kernel_init=self.kernel_init,
                         name="wi")(x)
        h = layers.activation(self.act)(h[..., 0, :]) * h[..., 1, :]
        h = layers.constrain(h, ("batch", "length", "mlp"))
        h = layers.Dropout(self.dropout_rate)(h, deterministic=deterministic)
        return layers.Dense(features=x.shape[-1], kernel_axes=("mlp", "embed"), use_bias=False,
                            dtype=self.dtype, kernel_init=self.out_init, name="wo")(h)
