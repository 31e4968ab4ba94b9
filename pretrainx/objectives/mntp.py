"""Masked next-token prediction (MNTP; BehnamGhader et al. 2024, LLM2Vec): how a decoder
made bidirectional learns to use the tokens after a position without forgetting its
head. Tokens are masked as BERT masks them, and a masked token at i is predicted from
the output at i - 1, where the decoder's next-token head already points.

The rows are causal LM's (objectives/causal_lm.py: packed documents, attention inside
each, positions restarting), with the masking of LLM2Vec's run_mntp.py, which uses
transformers' DataCollatorForLanguageModeling: each maskable token is chosen with
probability `data.mask_prob` (0.2 for LLM2Vec's 7B models), and a chosen one becomes the
mask token 80% of the time, a random token 10%, and stays 10%. Maskable: a real token
that is not special and has a predecessor in its own document (a document's first
token has no output before it to be predicted from). The loss is the cross entropy at
the positions before the chosen ones; the input to the last position's next token is
not in the row, so that token is never chosen. A decoder has no mask token: the
tokenizer's own if it has one, else `data.mask_token` (LLM2Vec's "blank", "_").

A family trains it as `<family>_mntp` (`entry`), which starts from its causal-LM
objective's keys with model.causal=False: bidirectional attention is the point (the
LLM2Vec paper's ablation finds MNTP without it of little use).
"""

import jax.numpy as jnp
import numpy as np

from pretrainx import config as config_lib
from pretrainx.errors import UserError
from pretrainx.objectives import contract
from pretrainx.objectives import mlm, next_token

# LLM2Vec's MNTP run (its 7B models' train_configs): 1,000 steps of 32 rows of 512 tokens,
# peak 5e-5 decaying linearly to 0 without warmup, AdamW at transformers' Trainer
# defaults; each maskable token chosen at 20%
RUN = dict(total_steps=1000, batch=32, seq_len=512, learning_rate=5e-5,
           schedule="warmup_linear", warmup_steps=0, eps=1e-8)
MASK_PROB = 0.2


def mask_following(inputs, follows, specials, ordinary, rate: float, mask_id: int, rng):
    """(inputs masked, loss weights) of a row: each token that `follows` a token of its
    own example (a real one, with a predecessor) and is not special is chosen with
    probability `rate`, then masked 80% / replaced by an `ordinary` token 10% / kept 10%
    (BERT's split, transformers' collator); weight 1 at the position before each chosen
    token, whose output predicts it."""
    inputs = np.array(inputs, copy=True)
    maskable = follows & ~np.isin(inputs, specials)
    chosen = maskable & (rng.random(inputs.size) < rate)
    how = rng.random(inputs.size)
    to_mask = chosen & (how < mlm.MASK_FRACTION)
    to_random = chosen & (how >= mlm.MASK_FRACTION + mlm.KEEP_FRACTION)
    inputs[to_mask] = mask_id
    inputs[to_random] = rng.choice(ordinary, size=int(to_random.sum()))
    weights = np.zeros(inputs.size, np.float32)
    weights[:-1] = chosen[1:]
    return inputs, weights


class MaskedNextTokenLoss(next_token.NextTokenLoss):
    """The loss part over rows that carry their targets (`next_ids`: the token after
    each position, unmasked) and weights (`loss_weights`: the masked ones' positions)."""

    def loss_sums(self, outputs, batch) -> dict:
        return next_token.token_sums(outputs["logits"], batch["next_ids"],
                                     batch["loss_weights"])

    def normalizers(self, batch) -> dict:
        return {"tokens": jnp.maximum(jnp.sum(batch["loss_weights"]), 1.0)}



class Masked:
    """Mixed in before a family's causal-LM objective: its rows, masked."""

    def __init__(self, cfg, tokenizer):
        super().__init__(cfg, tokenizer)
        if tokenizer is not None:
            self.mask_id = mask_id_of(tokenizer, cfg.data.mask_token)

    def describe(self, phase) -> dict:
        return dict(super().describe(phase), mask_prob=self.cfg.data.mask_prob,
                    mask_token=self.tokenizer.id_to_piece(self.mask_id))

    def transform(self, phase, train: bool):
        rows = super().transform(phase, train)
        specials = np.asarray(self.tokenizer.special_ids())
        ordinary = np.setdiff1d(np.arange(self.tokenizer.vocab_size), specials)
        rate = self.cfg.data.mask_prob

        def fn(row, rng):
            out = rows(row, rng)
            follows = np.zeros(out["inputs"].size, bool)  # input j, predicted at j - 1
            follows[1:] = out["loss_weights"][:-1] > 0
            inputs, weights = mask_following(out["inputs"], follows, specials, ordinary,
                                             rate, self.mask_id, rng)
            return dict(out, inputs=inputs, loss_weights=weights)

        return fn

    def batch_stats(self, batch) -> dict:
        stats = super().batch_stats(batch)
        return dict(stats, masked_inputs=int((batch["inputs"] == self.mask_id).sum()))

    def summarize_stats(self, totals, phase) -> dict:
        """target_fraction is the masking rate here (targets are the chosen tokens)."""
        return dict(super().summarize_stats(totals, phase),
                    mask_token_fraction=totals["masked_inputs"] / max(totals["targets"], 1))


def mask_id_of(tokenizer, mask_token: str) -> int:
    """The tokenizer's mask id, or the one id `mask_token` encodes to."""
    if tokenizer.mask_id >= 0:
        return tokenizer.mask_id
    ids = tokenizer.encode(mask_token)
    if len(ids) != 1:
        raise UserError(f"data.mask_token={mask_token!r} is {len(ids)} tokens in "
                        f"{tokenizer.path}; MNTP needs one (the tokenizer has no mask token)")
    return ids[0]


def entry(family: str, clm_class, bidirectional_model, clm_validate) -> contract.Entry:
    """The objective `<family>_mntp`: `clm_class`'s rows masked, the family's model keys
    with bidirectional attention (`bidirectional_model()`), and LLM2Vec's MNTP run
    (1,000 steps of 32 rows of 512 tokens, peak 5e-5 decaying linearly to 0 without
    warmup, AdamW at transformers' Trainer defaults; the paper trains LoRA adapters of
    rank 16 to fit a 7B model on one GPU, and every weight here: a drift for memory's
    sake only)."""
    name = family + contract.MNTP_SUFFIX
    cls = type(family.capitalize() + "Mntp", (Masked, clm_class), {})

    def defaults():
        c = config_lib.shared_config(name, **RUN)
        c.model = bidirectional_model()
        c.data.lower_case = False
        c.data.mask_prob = MASK_PROB
        c.data.mask_token = "_"
        return c

    def validate(cfg):
        if not 0.0 < cfg.data.mask_prob < 1.0:
            raise UserError(f"data.mask_prob={cfg.data.mask_prob} must be in (0, 1)")
        model = cfg.model.copy_and_resolve_references()
        model.causal = True  # the causal-LM checks, for the network's own keys
        clm_validate(dict_with(cfg, model))

    return contract.Entry(name=name, build=cls, defaults=defaults, validate=validate,
                          as_pretrained=lambda model_cfg, params: (model_cfg, params,
                                                                    "causal_lm"),
                          own_model_keys=("causal",))


def dict_with(cfg, model):
    out = cfg.copy_and_resolve_references()
    with out.unlocked():
        out.model = model
    return out
