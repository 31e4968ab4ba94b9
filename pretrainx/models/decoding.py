"""Search over a decoder's next-token logits: greedy and beam search, as HF's `generate`
does them, over any model that decodes one token a step from a key-value cache; and
`encoder_decoder`, which reruns a decoder on the whole prefix (T5, whose fine-tuning
targets are a few tokens), with temperature, top-k and top-p (`filter_logits`).

A model supplies `step(cache, tokens [rows], position) -> (logits [rows, vocab], cache)`
and a cache whose arrays all lead with the row axis (beam search reorders them). Both
searches run a fixed number of steps inside one jitted loop (`lax.fori_loop`), so they
compile once per shape; a row that has written its EOS stays finished.

Beam search follows transformers' vectorised `_beam_search` (4.57): 2 x beams
candidates a step, hypotheses that end in EOS scored by summed log-probabilities over
generated_length ** length_penalty, `early_stopping` False / True as there, and the
finished list closed once no running beam can beat its worst entry. `forced_eos`
(BART's `forced_eos_token_id`) makes the last step write EOS.
"""

import jax
import jax.numpy as jnp

_NEG = -1.0e9  # HF's "never": finished candidates, the unused start beams


def reorder(cache, rows):
    """The cache with its rows taken from `rows` (arrays without a row axis kept)."""
    return jax.tree_util.tree_map(lambda x: x[rows] if x.ndim else x, cache)


def _force_eos(logits, eos_id, on):
    forced = jnp.full_like(logits, -jnp.inf).at[:, eos_id].set(0.0)
    return jnp.where(on, forced, logits)


def greedy(step, cache, start_ids, length: int, eos_id: int, pad_id: int,
           forced_eos: bool = False):
    """[rows, length] argmax tokens after `start_ids` [rows] (the first of tied maxima);
    after a row's EOS the row holds `pad_id`."""
    rows = start_ids.shape[0]

    def body(i, carry):
        cache, token, done, out = carry
        logits, cache = step(cache, token, i)
        logits = _force_eos(logits.astype(jnp.float32), eos_id, forced_eos & (i == length - 1))
        token = jnp.where(done, pad_id, jnp.argmax(logits, -1).astype(jnp.int32))
        return cache, token, done | (token == eos_id), out.at[:, i].set(token)

    init = (cache, start_ids.astype(jnp.int32), jnp.zeros(rows, bool),
            jnp.zeros((rows, length), jnp.int32))
    return jax.lax.fori_loop(0, length, body, init)[3]


def beam_search(step, cache, start_ids, num_beams: int, length: int, eos_id: int,
                pad_id: int, length_penalty: float = 1.0, early_stopping: bool = False,
                forced_eos: bool = False):
    """(tokens [batch, length], scores [batch]): each input's best finished hypothesis.

    The cache and `start_ids` hold batch x num_beams rows, input b's beams at rows
    b * num_beams ... (b + 1) * num_beams - 1; positions after a hypothesis's EOS hold
    `pad_id`."""
    rows = start_ids.shape[0]
    batch, k = rows // num_beams, num_beams
    wide = 2 * k  # enough candidates that k of them go on even if k end in EOS
    top_k_mask = jnp.arange(wide) < k
    take = lambda x, index: jnp.take_along_axis(  # noqa: E731  per input, along the beams
        x, index.reshape(index.shape + (1,) * (x.ndim - 2)), axis=1)

    def body(i, carry):
        cache, token, run_seq, run_score, seq, score, finished, open_ = carry
        logits, cache = step(cache, token, i)
        logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
        logp = _force_eos(logp, eos_id, forced_eos & (i == length - 1))
        vocab = logp.shape[-1]
        total = (logp.reshape(batch, k, vocab) + run_score[:, :, None]).reshape(batch, -1)
        cand_score, flat = jax.lax.top_k(total, wide)
        source, ids = flat // vocab, (flat % vocab).astype(jnp.int32)
        cand_seq = take(run_seq, source).at[:, :, i].set(ids)
        hits = (ids == eos_id) | (i == length - 1)
        # the k best candidates that go on
        going = cand_score + hits * _NEG
        going_score, pick = jax.lax.top_k(going, k)
        run_seq, run_score = take(cand_seq, pick), going_score
        parent = take(source, pick)
        # the candidates that finish, scored, merged into the finished list
        ended = cand_score / ((i + 1) ** length_penalty)
        full = jnp.all(finished, axis=1, keepdims=True) & (early_stopping is True)
        just = hits & top_k_mask[None, :]
        ended = ended + full * _NEG + (~open_) * _NEG + (~just) * _NEG
        merged_score = jnp.concatenate([score, ended], axis=1)
        _, best = jax.lax.top_k(merged_score, k)
        seq = take(jnp.concatenate([seq, cand_seq], axis=1), best)
        score = take(merged_score, best)
        finished = take(jnp.concatenate([finished, just], axis=1), best)
        # can a running beam still beat the worst finished one?
        if early_stopping == "never" and length_penalty > 0:
            hypothetical = length
        else:
            hypothetical = i + 1
        best_running = run_score[:, :1] / (hypothetical ** length_penalty)
        worst = jnp.where(finished, jnp.min(score, axis=1, keepdims=True), _NEG)
        open_ = open_ & jnp.any(best_running > worst, axis=1, keepdims=True)
        rows_from = (parent + jnp.arange(batch)[:, None] * k).reshape(-1)
        cache = reorder(cache, rows_from)
        token = run_seq[:, :, i].reshape(-1)
        return cache, token, run_seq, run_score, seq, score, finished, open_

    run_score = jnp.tile(jnp.where(jnp.arange(k) == 0, 0.0, _NEG), (batch, 1))
    sequences = jnp.full((batch, k, length), pad_id, jnp.int32)
    init = (cache, start_ids.astype(jnp.int32), sequences, run_score, sequences,
            jnp.full((batch, k), _NEG), jnp.zeros((batch, k), bool),
            jnp.ones((batch, 1), bool))
    out = jax.lax.fori_loop(0, length, body, init)
    return out[4][:, 0], out[5][:, 0]


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
