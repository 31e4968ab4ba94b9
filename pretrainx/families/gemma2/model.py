"""Gemma 2 (Gemma Team 2024): the decoder T5Gemma adapts, one stack of T5Gemma's blocks
(families/t5gemma/model.py) attending causally, as transformers' Gemma2ForCausalLM:
sqrt(width)-scaled embeddings, pre- and post-norms, grouped-query attention with rotary
positions and soft-capped scores, GeGLU, sliding-window layers (the query and the window
- 1 keys before it) alternating with global ones, the output tied to the word table and
its logits soft-capped. Its keys are T5Gemma's encoder-shape keys."""

import jax.numpy as jnp
import ml_collections
from flax import linen as nn

from pretrainx.families.t5gemma import model as t5gemma
from pretrainx.models import layers

SHARED_KEYS = ("vocab_size", "hidden_act", "rms_norm_eps", "rope_theta",
               "attn_logit_softcapping", "final_logit_softcapping", "dropout_rate",
               "attention_dropout_rate", "initializer_range")


def default_config() -> ml_collections.ConfigDict:
    """Gemma 2 2B's keys (google/gemma-2-2b)."""
    full = t5gemma.default_config()
    m = ml_collections.ConfigDict({k: full[k] for k in t5gemma.STACK_KEYS + SHARED_KEYS})
    m.family = "gemma2"
    m.causal = True
    m.max_position_embeddings = 8192
    m.tie_output = True
    m.update(layers.compute_keys())
    return m


class Gemma2(nn.Module):
    """(batch: inputs, segment_ids, positions[, prefix]) -> next-token logits."""
    cfg: ml_collections.ConfigDict

    def setup(self):
        cfg = self.cfg
        self.dtype = jnp.dtype(cfg.dtype)
        self.token_embed = layers.Embed(cfg.vocab_size, cfg.hidden_size, ("vocab", "embed"),
                                        self.dtype, nn.initializers.normal(cfg.initializer_range))
        block = (nn.remat(t5gemma.Block, policy=layers.REMAT_POLICIES[cfg.remat],
                          static_argnums=(6,)) if cfg.remat != "none" else t5gemma.Block)
        shape = t5gemma.stack(cfg, False)
        self.layers = [block(cfg, shape, self.dtype, i, name=f"layer_{i}")
                       for i in range(cfg.num_layers)]
        self.final_norm = layers.RMSNorm(cfg.rms_norm_eps, self.dtype, plus_one=True)

    def hidden(self, batch, deterministic: bool = True):
        segments = batch["segment_ids"]
        scale = jnp.asarray(self.cfg.hidden_size ** 0.5, self.dtype)
        x = layers.constrain(self.token_embed(batch["inputs"]) * scale,
                             ("batch", "length", "embed"))
        rows = layers.Mask(segments, segments, causal=bool(self.cfg.causal),
                           kv_prefix=layers.prefix_of(batch))
        for layer in self.layers:
            x = layer(x, rows, batch["positions"], None, None, deterministic)
        return self.final_norm(x)

    def logits(self, h):
        logits = self.token_embed.attend(h).astype(jnp.float32)
        cap = self.cfg.final_logit_softcapping
        if cap:
            logits = cap * jnp.tanh(logits / cap)
        return layers.constrain(logits, ("batch", "length", "vocab"))

    def __call__(self, batch, deterministic: bool = True):
        return {"logits": self.logits(self.hidden(batch, deterministic))}


def outputs(cfg, params, batch) -> dict:
    """For pretrainx.load: final states and next-token logits of unpacked rows."""
    ids, mask = batch["input_ids"], batch["attention_mask"]
    positions = jnp.broadcast_to(jnp.arange(ids.shape[1]), ids.shape)
    rows = {"inputs": ids, "segment_ids": mask, "positions": positions}

    def run(net):
        h = net.hidden(rows)
        return {"hidden_states": h, "logits": net.logits(h)}
    return Gemma2(cfg).apply({"params": params}, method=run)


def flops_per_token(cfg, seq_len: int) -> float:
    """Training FLOPs a token (forward x 3): projections, GeGLU, scores over the keys a
    layer reads (all of the row in global layers, at most the window in sliding ones),
    the output layer."""
    inner, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    h = cfg.hidden_size
    keys = sum(seq_len if t5gemma.is_global(i) else min(seq_len, cfg.sliding_window)
               for i in range(cfg.num_layers))
    per_token = cfg.num_layers * 2 * (2 * h * inner + 2 * h * kv + 3 * h * cfg.mlp_dim)
    return 3.0 * (per_token + 4 * inner * keys + 2 * h * cfg.vocab_size)
