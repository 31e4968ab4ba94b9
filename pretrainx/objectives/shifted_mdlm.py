"""Masked diffusion for a decoder made bidirectional (`<family>_mdlm` of Qwen3, Gemma 3,
GPT-2): MDLM's objective (objectives/mdlm.py: a mask rate t a row, MDLM's
low-discrepancy draw over the global batch, every chosen token the mask, the cross
entropy weighted by 1/t, the bound over the maskable tokens) with MNTP's shift: a masked
token at i is predicted from the output at i - 1, where the decoder's next-token head
already points. That is how Dream 7B (Ye et al. 2025, from Qwen2.5) and DiffuLLaMA (Gong
et al. 2025) adapt a causal model to diffusion: the head keeps its meaning, only the
attention turns bidirectional.

The rows are the family's causal-LM rows (packed documents, attention inside each); a
token is maskable when it is real, not special and has a predecessor in its own
document (a document's first token has no output before it), as in MNTP (mntp.py), so
the bound covers the tokens causal LM predicts but the end of the row. The mask is the
tokenizer's, else `data.mask_token` (mntp.mask_id_of). `python -m pretrainx.generate
--diffusion_steps=T` writes with the result, reading each position's prediction from the
output before it.
"""

import numpy as np

from pretrainx.errors import UserError
from pretrainx.objectives import contract, mdlm, mntp

SUFFIX = "_mdlm"


class Diffused(mdlm.MdlmLoss):
    """Mixed in before a family's causal-LM objective: its rows masked at a rate a row,
    MDLM's bound as the loss (over the logits at every position)."""
    logits_key, ids_key, weights_key = "logits", "targets", "loss_weights"

    def __init__(self, cfg, tokenizer):
        super().__init__(cfg, tokenizer)
        if tokenizer is not None:
            self.mask_id = mntp.mask_id_of(tokenizer, cfg.data.mask_token)

    def describe(self, phase) -> dict:
        return dict(super().describe(phase), mask_token=self.tokenizer.id_to_piece(
            self.mask_id), mask_rate="t ~ U(0, 1) a row, low-discrepancy over the batch")

    def transform(self, phase, train: bool):
        """(row, rng, index) -> the causal-LM row, masked at its batch position's rate;
        loss_weights 1/t at the positions before the masked tokens."""
        rows = super().transform(phase, train)
        specials = np.asarray(self.tokenizer.special_ids())
        seed = self.cfg.seed * 1000 + phase.index + (0 if train else 500)

        def fn(row, rng, index):
            out = rows(row, rng)
            inputs, same = out["inputs"].copy(), out["loss_weights"] > 0
            maskable = np.zeros(inputs.size, bool)  # input j, predicted at j - 1
            maskable[1:] = same[:-1] & ~np.isin(inputs[1:], specials)
            t = mdlm.rate(seed, index, phase.global_batch_size)
            chosen = maskable & (rng.random(inputs.size) < t)
            inputs[chosen] = self.mask_id
            weights = np.zeros(inputs.size, np.float32)
            weights[:-1] = chosen[1:] / t
            return dict(out, inputs=inputs, loss_weights=weights,
                        mdlm_tokens=np.float32(maskable.sum()), mask_rate=np.float32(t))

        fn.indexed = True
        return fn

    def example_batch(self, batch_size: int, phase) -> dict:
        return dict(super().example_batch(batch_size, phase), **mdlm.rate_features(batch_size))

    def batch_stats(self, batch) -> dict:
        stats = super().batch_stats(batch)
        return dict(stats, targets=int((batch["loss_weights"] > 0).sum()),
                    rate_sum=float(batch["mask_rate"].sum()))

    def summarize_stats(self, totals, phase) -> dict:
        """target_fraction: the masked share of the real tokens."""
        return dict(super().summarize_stats(totals, phase),
                    mean_mask_rate=totals["rate_sum"] / max(totals["rows"], 1))


def entry(family: str, clm_class, recipe, clm_validate) -> contract.Entry:
    """The objective `<family>_mdlm`: `clm_class`'s rows and every key of the family's
    causal-LM recipe, the attention bidirectional (`recipe(name)`: that recipe for the
    objective `name`, model.causal=False). Dream trains with its base model's recipe at
    a lower peak; the recipe is kept here, named as the drift."""
    name = family + SUFFIX
    cls = type(family.capitalize() + "Mdlm", (Diffused, clm_class), {})

    def defaults():
        c = recipe(name)
        c.data.mask_token = "_"  # LLM2Vec's blank, where the tokenizer has no mask
        return c

    def validate(cfg):
        if cfg.model.causal:
            raise UserError(f"objective={name} unmasks with bidirectional attention: set "
                            "model.causal=False")
        model = cfg.model.copy_and_resolve_references()
        model.causal = True  # the causal-LM checks, for the network's own keys
        clm_validate(mntp.dict_with(cfg, model))

    return contract.Entry(name=name, build=cls, defaults=defaults, validate=validate,
                          as_pretrained=lambda model_cfg, params: (model_cfg, params,
                                                                    "causal_lm"),
                          own_model_keys=("causal",))


def shifted_logits(logits):
    """[L, vocab] of a row's next-token logits -> each position's prediction from the
    output before it (the first position's is its own: it is never masked)."""
    logits = np.asarray(logits)
    return np.concatenate([logits[:1], logits[:-1]], axis=0)
