"""Autoregressive sampling: greedy, top-k, top-p.

`generate` continues a GPT-2 prompt with a key-value cache: the prompt is fed one
token at a time through the same jitted step as the generated tokens (each step
attends to the cache, so a step costs one token's work); only that step is compiled.

`encoder_decoder` writes an encoder-decoder's outputs (T5: fine-tuning's
predictions, the notebook's samples): the input is encoded once, and the decoder
reruns on the whole prefix at each step (no cache: targets there are a few tokens).
"""

import jax
import jax.numpy as jnp
import numpy as np

from pretrainx.models import gpt2


def filter_logits(logits, temperature: float, top_k: int, top_p: float):
    """Logits with everything outside the top-k / nucleus set to -inf, scaled by
    1 / temperature. temperature 0 is greedy: only the argmax survives."""
    if temperature == 0.0:
        keep = logits == jnp.max(logits, axis=-1, keepdims=True)
        return jnp.where(keep, 0.0, -jnp.inf)
    logits = logits / temperature
    if top_k > 0:
        kth = jnp.sort(logits, axis=-1)[..., -top_k][..., None]
        logits = jnp.where(logits < kth, -jnp.inf, logits)
    if top_p < 1.0:
        order = jnp.argsort(-logits, axis=-1)
        sorted_logits = jnp.take_along_axis(logits, order, axis=-1)
        probs = jax.nn.softmax(sorted_logits, axis=-1)
        before = jnp.cumsum(probs, axis=-1) - probs  # mass of the tokens ranked above
        drop_sorted = before >= top_p  # the smallest set reaching top_p is kept
        drop = jnp.zeros_like(drop_sorted).at[
            jnp.arange(logits.shape[0])[:, None], order].set(drop_sorted)
        logits = jnp.where(drop, -jnp.inf, logits)
    return logits


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
    model = gpt2.GPT2(model_cfg, decode=True)
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


def encoder_decoder(model, params, tokens, segments, length: int, temperature: float = 0.0,
                    top_k: int = 0, top_p: float = 1.0, key=None):
    """[batch, length] outputs of a model with `encode(tokens, segments, deterministic)`
    and `decode(encoded, segments, decoder_inputs, decoder_segments, deterministic)`,
    starting from id 0 as T5 does; temperature 0 is greedy decoding. Rows go on past
    their EOS (callers cut there), as HF's generate pads finished rows."""
    key = jax.random.key(0) if key is None else key
    encoded = model.apply({"params": params}, tokens, segments, True, method="encode")
    out = jnp.zeros((tokens.shape[0], length), jnp.int32)
    ones = jnp.ones_like(out)

    def step(i, out):
        previous = jnp.concatenate([jnp.zeros_like(out[:, :1]), out[:, :-1]], axis=1)
        logits = model.apply({"params": params}, encoded, segments, previous, ones, True,
                             method="decode")[:, i]
        if temperature == 0.0:  # the first of tied maxima, as argmax and HF's greedy search
            token = jnp.argmax(logits, axis=-1)
        else:
            logits = filter_logits(logits.astype(jnp.float32), temperature, top_k, top_p)
            token = jax.random.categorical(jax.random.fold_in(key, i), logits)
        return out.at[:, i].set(token.astype(jnp.int32))

    return jax.lax.fori_loop(0, length, step, out)
