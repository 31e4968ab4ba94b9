"""Masked diffusion language modelling (MDLM; Sahoo et al. 2024; LLaDA, Nie et al. 2025):
an encoder trained to undo masking at every rate, so that it can write text by unmasking
a canvas step by step.

Training (the linear schedule, alpha_t = 1 - t): each row draws a rate t, every maskable
token (a real, non-special one) becomes the mask with probability t (no 80/10/10: the
mask is the only corruption), and the cross entropy at the masked tokens is weighted by
1/t. Over t ~ U(0, 1) that is the negative ELBO of the row's tokens, so the loss, summed
and divided by the maskable tokens, bounds the negative log-likelihood per token and
exp(bound) bounds the perplexity (the held-out `bound_perplexity`, the number MDLM
compares with an autoregressive model's perplexity). The rates of a batch are MDLM's
low-discrepancy draw: row i of a global batch of B takes t = (u + i / B) mod 1 with one u
per batch, floored at 1e-3 (`rate`), which lowers the loss's variance against B
independent draws; u comes from the seed and the batch's number, so a resumed run and an
eval pass draw the same rates.

Instruction tuning (dLLM's SFT, LLaDA's): with `data.response_only` a source is a JSONL
file of prompt and response pairs (`data.prompt_field`, `data.response_field`), a row
[CLS] prompt [SEP] response [SEP] each; only the response's tokens are ever masked, so
the model learns to write a response given its whole prompt (`instruction_examples`,
`maskable_tokens`).

Sampling (`unmask`): a canvas of masks (after a prompt, if any) is filled in T steps, a
share of the masked positions revealed each step: chosen at random (MDLM's ancestral
sampler), or the most confident predictions first (LLaDA's low-confidence remasking:
the rest are masked again).
"""

import glob
import os

import jax.numpy as jnp
import numpy as np
import optax

from pretrainx import config as config_lib
from pretrainx.data import jsonl
from pretrainx.errors import UserError
from pretrainx.objectives import accuracy

EPS = 1e-3  # the smallest rate: 1/t stays finite
REMASKING = ("random", "confidence")


def rate(seed: int, index: int, global_batch: int) -> float:
    """The mask rate of the row at `index` of the stream of global batches."""
    batch, i = divmod(int(index), int(global_batch))
    u = np.random.default_rng([int(seed), 7919, batch]).random()
    return EPS + (1.0 - EPS) * ((u + i / global_batch) % 1.0)


def mask_row(input_ids, maskable, t: float, rng, mask_id: int, max_predictions: int) -> dict:
    """`input_ids` [L] with each `maskable` token masked with probability t; the masked
    positions, their tokens and weights 1/t padded to max_predictions (the MLM heads'
    gathered positions), and the row's maskable count (the bound's denominator)."""
    chosen = np.flatnonzero(maskable & (rng.random(input_ids.size) < t))
    if chosen.size > max_predictions:
        raise UserError(f"data.max_predictions_per_seq={max_predictions} is less than the "
                        f"{chosen.size} tokens a row masked at rate {t:.3f}: MDLM masks up "
                        "to every token, so set it to seq_len")
    masked = np.asarray(input_ids, np.int32).copy()
    masked[chosen] = mask_id
    positions = np.zeros(max_predictions, np.int32)
    ids = np.zeros(max_predictions, np.int32)
    weights = np.zeros(max_predictions, np.float32)
    positions[:chosen.size], ids[:chosen.size] = chosen, input_ids[chosen]
    weights[:chosen.size] = 1.0 / t
    return {"input_ids": masked, "masked_lm_positions": positions, "masked_lm_ids": ids,
            "masked_lm_weights": weights, "mdlm_tokens": np.float32(maskable.sum()),
            "mask_rate": np.float32(t)}


def add_response_keys(c) -> None:
    """The data keys of instruction tuning (off: pretraining on documents)."""
    c.data.response_only = False
    c.data.prompt_field = "prompt"
    c.data.response_field = "response"


def check_documents(cfg) -> None:
    """An objective other than MDLM reads documents: data.response_only is refused."""
    if cfg.data.get("response_only"):
        raise UserError(f"data.response_only=True is masked diffusion's instruction tuning; "
                        f"objective {cfg.objective} reads documents (set it False)")


def instruction_examples(spec: str, data, tokenizer, seq_len: int) -> list:
    """The examples of a JSONL file (or glob) of pairs: input_ids [CLS] prompt [SEP]
    response [SEP], one pair a row (its segment ids and positions), and
    `response_start`, the first response token's index. A pair longer than the row
    loses the prompt's start (down to half the row) and the response's end."""
    if seq_len < 8:
        raise UserError(f"seq_len={seq_len}: too short for a prompt and a response")
    paths = sorted(glob.glob(spec)) if any(c in spec for c in "*?[") else [spec]
    if not paths or not all(os.path.isfile(p) for p in paths):
        raise UserError(f"data.response_only reads JSONL files of pairs: {spec} is not one")
    fields = (data.prompt_field, data.response_field)
    out = []
    for path in paths:
        for record in jsonl.records(path, fields):
            prompt = list(tokenizer.encode(str(record[fields[0]])))
            response = list(tokenizer.encode(str(record[fields[1]])))
            room = seq_len - 3  # [CLS], [SEP] and the last [SEP]
            # too long: the prompt keeps its end (at least half the room), the response
            # its start
            keep = min(len(prompt), max(room - len(response), room // 2))
            prompt, start = prompt[len(prompt) - keep:], keep + 2
            ids = ([tokenizer.cls_id] + prompt + [tokenizer.sep_id]
                   + response[:room - keep] + [tokenizer.sep_id])
            out.append({"input_ids": np.asarray(ids, np.int32),
                        "segment_ids": np.ones(len(ids), np.int32),
                        "positions": np.arange(len(ids), dtype=np.int32),
                        "response_start": np.int32(start)})
    if not out:
        raise UserError(f"{spec} holds no pairs")
    return out


def maskable_tokens(input_ids, attention_mask, specials, response_start=None):
    """Which tokens a row may mask: real, not special, and (instruction tuning) in the
    response, from `response_start` on."""
    maskable = (attention_mask > 0) & ~np.isin(input_ids, specials)
    if response_start is not None:
        maskable &= np.arange(input_ids.size) >= response_start
    return maskable


def check_room(cfg) -> None:
    """Every phase's MLM head gathers as many positions as a row has tokens."""
    for phase in config_lib.phases(cfg):
        if phase.max_predictions < phase.seq_len:
            raise UserError(f"{phase.prefix or 'data.'}max_predictions_per_seq="
                            f"{phase.max_predictions} is less than seq_len={phase.seq_len}: "
                            "MDLM masks up to every token of a row")


def rate_features(batch_size: int) -> dict:
    """The per-row features an MDLM batch adds (example_batch): maskable tokens, rate."""
    return {"mdlm_tokens": np.ones(batch_size, np.float32),
            "mask_rate": np.ones(batch_size, np.float32)}


class MdlmLoss:
    """The loss part of an MDLM objective (assembled.py) over an MLM head's gathered
    logits (or, with the keys below set, a decoder's logits at every position): the
    1/t-weighted cross entropy summed, over the maskable tokens."""
    logits_key, ids_key, weights_key = "mlm_logits", "masked_lm_ids", "masked_lm_weights"

    def loss_sums(self, outputs, batch) -> dict:
        logits = outputs[self.logits_key].astype(jnp.float32)
        ids = batch[self.ids_key].astype(jnp.int32)
        weights = batch[self.weights_key].astype(jnp.float32)
        chosen = (weights > 0).astype(jnp.float32)
        nll = optax.softmax_cross_entropy_with_integer_labels(logits, ids)
        correct = accuracy.argmax_matches(logits, ids).astype(jnp.float32)
        return {"bound_sum": jnp.sum(nll * weights), "masked_nll_sum": jnp.sum(nll * chosen),
                "correct_sum": jnp.sum(correct * chosen), "masked_sum": jnp.sum(chosen),
                "token_sum": jnp.sum(batch["mdlm_tokens"])}

    def normalizers(self, batch) -> dict:
        return {"tokens": jnp.maximum(jnp.sum(batch["mdlm_tokens"]), 1.0),
                "masked": jnp.maximum(jnp.sum(batch[self.weights_key] > 0), 1.0)}

    def loss(self, sums, norms):
        return sums["bound_sum"] / norms["tokens"]

    def metrics(self, sums, norms) -> dict:
        return {"mlm_accuracy": sums["correct_sum"] / norms["masked"],
                "masked_fraction": norms["masked"] / norms["tokens"]}

    def eval_metrics(self, totals) -> dict:
        tokens = max(float(totals["token_sum"]), 1.0)
        masked = max(float(totals["masked_sum"]), 1.0)
        bound = float(totals["bound_sum"]) / tokens
        return {"loss": bound, "bound_perplexity": float(np.exp(min(bound, 50.0))),
                "mlm_loss": float(totals["masked_nll_sum"]) / masked,
                "mlm_accuracy": float(totals["correct_sum"]) / masked}


def reveal_counts(masked: int, steps: int) -> list:
    """How many masked positions each of `steps` steps reveals: as even as can be, the
    earlier steps taking the remainder (LLaDA's get_num_transfer_tokens)."""
    if steps < 1:
        raise UserError(f"--diffusion_steps={steps} must be at least 1")
    if steps > masked:
        raise UserError(f"--diffusion_steps={steps} is more than the {masked} masked tokens "
                        "to fill: each step reveals at least one")
    base, extra = divmod(masked, steps)
    return [base + (1 if s < extra else 0) for s in range(steps)]


def unmask(logits_fn, ids, mask_id: int, steps: int, seed: int, temperature: float = 0.0,
           remasking: str = "confidence", forbidden=()) -> np.ndarray:
    """Fill the `mask_id` positions of `ids` [L] in `steps` steps. Each step
    `logits_fn(ids)` -> [L, vocab] predicts every position; a token is drawn for each
    masked one (argmax at temperature 0, else sampled at that temperature; `forbidden`
    ids and the mask never), and `reveal_counts` of them are kept: those with the most
    probable draws (confidence) or a random choice of them (random); the others stay
    masked. Deterministic given `seed`."""
    if remasking not in REMASKING:
        raise UserError(f"--remasking={remasking!r}: expected one of {', '.join(REMASKING)}")
    ids = np.asarray(ids, np.int64).copy()
    rng = np.random.default_rng(seed)
    for count in reveal_counts(int((ids == mask_id).sum()), steps):
        logits = np.asarray(logits_fn(ids), np.float64)
        logits[:, [mask_id, *forbidden]] = -np.inf
        logits -= logits.max(axis=-1, keepdims=True)
        probs = np.exp(logits)
        probs /= probs.sum(axis=-1, keepdims=True)
        if temperature > 0:
            gumbel = -np.log(-np.log(rng.random(logits.shape)))
            draw = np.argmax(logits / temperature + gumbel, axis=-1)
        else:
            draw = np.argmax(logits, axis=-1)
        score = (probs[np.arange(ids.size), draw] if remasking == "confidence"
                 else rng.random(ids.size))
        still = np.flatnonzero(ids == mask_id)
        keep = still[np.argsort(-score[still], kind="stable")[:count]]
        ids[keep] = draw[keep]
    return ids
