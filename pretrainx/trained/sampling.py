"""Autoregressive sampling: greedy, top-k, top-p.

`generate` continues a prompt of a causal family (GPT-2) with a key-value cache: the
prompt is fed one token at a time through the same jitted step as the generated tokens
(each step attends to the cache, so a step costs one token's work); only that step is
compiled.

`generate_prefixed` continues one of a decoder trained as a prefix LM
(`<family>_prefixlm`): the prompt is the prefix, read both ways, and each new token
follows causally, as it trained. It reruns the whole row every step (no cache).

Encoder-decoders decode through `models.decoding` (greedy and beam search over a
key-value cache; T5's short targets rerun the decoder on the prefix).
"""

import jax
import jax.numpy as jnp
import numpy as np

from pretrainx import models
from pretrainx.models.decoding import filter_logits


def generate(model_cfg, params, prompt_ids, max_new_tokens: int, temperature: float = 1.0,
             top_k: int = 0, top_p: float = 1.0, seed: int = 0, num_samples: int = 1,
             stop_id: int | None = None) -> np.ndarray:
    """[num_samples, new tokens] continuing `prompt_ids` (cut at `stop_id`, included)."""
    prompt = list(prompt_ids)
    total = len(prompt) + max_new_tokens
    if not prompt:
        raise ValueError("the prompt needs at least one token")
    if total > model_cfg.max_position_embeddings:
        raise ValueError(f"prompt ({len(prompt)}) + max_new_tokens ({max_new_tokens}) exceeds "
                         f"the model's {model_cfg.max_position_embeddings} positions")
    model = models.family(model_cfg.family).causal_sampling(model_cfg)
    shape = (num_samples, total)
    cache = jax.jit(lambda: model.init(
        jax.random.key(0), {"inputs": jnp.zeros(shape, jnp.int32),
                            "segment_ids": jnp.ones(shape, jnp.int32),
                            "positions": jnp.zeros(shape, jnp.int32)})["cache"])()

    @jax.jit
    def step(cache, token, position, key):
        batch = {"inputs": token, "segment_ids": jnp.ones_like(token),
                 "positions": jnp.broadcast_to(position, token.shape)}
        out, changed = model.apply({"params": params, "cache": cache}, batch, mutable=["cache"])
        logits = filter_logits(out["logits"][:, -1], temperature, top_k, top_p)
        return changed["cache"], jax.random.categorical(key, logits).astype(jnp.int32)

    keys = jax.random.split(jax.random.key(seed), total)
    token = jnp.full((num_samples, 1), prompt[0], jnp.int32)
    out = []
    for position in range(total - 1):
        cache, sampled = step(cache, token, jnp.int32(position), keys[position])
        if position + 1 < len(prompt):
            token = jnp.full((num_samples, 1), prompt[position + 1], jnp.int32)
        else:
            out.append(np.asarray(sampled))
            token = sampled[:, None]
    tokens = np.stack(out, axis=1) if out else np.zeros((num_samples, 0), np.int32)
    if stop_id is not None:
        tokens = [row[:list(row).index(stop_id) + 1] if stop_id in row else row
                  for row in tokens]
    return tokens


def generate_prefixed(model_cfg, params, prompt_ids, max_new_tokens: int,
                      temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                      seed: int = 0, num_samples: int = 1,
                      stop_id: int | None = None) -> np.ndarray:
    """As `generate`, for a PrefixLM: the prompt attends to itself both ways."""
    prompt = list(prompt_ids)
    total = len(prompt) + max_new_tokens
    if not prompt:
        raise ValueError("the prompt needs at least one token")
    if total > model_cfg.get("max_position_embeddings", total):
        raise ValueError(f"prompt ({len(prompt)}) + max_new_tokens ({max_new_tokens}) exceeds "
                         f"the model's {model_cfg.max_position_embeddings} positions")
    network = models.family(model_cfg.family).next_token_network(model_cfg)
    positions = jnp.broadcast_to(jnp.arange(total), (num_samples, total))
    prefix = (positions < len(prompt)).astype(jnp.int32)

    @jax.jit
    def step(tokens, length, key):
        batch = {"inputs": tokens, "segment_ids": (positions < length).astype(jnp.int32),
                 "positions": positions, "prefix": prefix}
        logits = network.apply({"params": params}, batch)["logits"]
        last = jax.lax.dynamic_index_in_dim(logits, length - 1, axis=1, keepdims=False)
        last = filter_logits(last.astype(jnp.float32), temperature, top_k, top_p)
        return jax.random.categorical(key, last).astype(jnp.int32)

    keys = jax.random.split(jax.random.key(seed), total)
    tokens = np.zeros((num_samples, total), np.int32)
    tokens[:, :len(prompt)] = prompt
    for length in range(len(prompt), total):
        tokens[:, length] = np.asarray(step(tokens, jnp.int32(length), keys[length]))
    out = tokens[:, len(prompt):]
    if stop_id is not None:
        out = [row[:list(row).index(stop_id) + 1] if stop_id in row else row for row in out]
    return out
