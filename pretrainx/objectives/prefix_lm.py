"""PrefixLM for a decoder (`<family>_prefixlm` of GPT-2, Qwen3, Gemma 3): the family's
causal-LM rows, each document's piece of a row split at a point drawn uniformly in
[1, n - 1] (as t5.data.preprocessors.random_prefix_noise_mask, UL2's S-denoiser); the
prefix attends to itself both ways, what follows sees the prefix and itself causally
(Raffel et al. 2020's prefix LM, the decoder-only form of UL2 and RedLLM), and the loss
is on the tokens after the prefix only.

The split is drawn at batch time, afresh every epoch. The batch carries `prefix` (1 on
the prefix's tokens), which the decoders' attention reads (attention.prefix_of); the
kernels take no such mask, so attention runs on XLA's path. With `distill.teacher` a
frozen causal decoder's next-token distribution joins the loss (logit_distill.py).
"""

import ml_collections
import numpy as np

from pretrainx.errors import UserError
from pretrainx.objectives import contract, logit_distill

SUFFIX = "_prefixlm"


def split_points(segments: np.ndarray, rng) -> np.ndarray:
    """Per token, the prefix length of its segment: uniform in [1, n - 1] for a segment
    of n >= 2 tokens, 0 (no prefix) for shorter ones and for padding."""
    counts = np.bincount(segments, minlength=int(segments.max()) + 1)
    points = np.zeros(counts.size, np.int64)
    for s in range(1, counts.size):
        if counts[s] >= 2:
            points[s] = rng.integers(1, counts[s])
    return points[segments]


def split(segments: np.ndarray, positions: np.ndarray, rng):
    """(prefix: int32 1 on each segment's first split_points tokens, after: bool, position
    i's next token is a target after its segment's prefix, i >= point - 1)."""
    point = split_points(segments, rng)
    prefix = (positions < point) & (segments > 0)
    return prefix.astype(np.int32), positions >= point - 1


class Prefixed:
    """Mixed in before a family's causal-LM objective: its rows with a prefix a
    document, the loss on the rest."""

    def describe(self, phase) -> dict:
        return dict(super().describe(phase), prefix="uniform in [1, n - 1] a document")

    def transform(self, phase, train: bool):
        rows = super().transform(phase, train)

        def fn(row, rng):
            out = rows(row, rng)
            prefix, after = split(out["segment_ids"], out["positions"], rng)
            # input i predicts token i + 1: a target after the prefix when i >= point - 1
            return dict(out, prefix=prefix,
                        loss_weights=(out["loss_weights"] * after).astype(np.float32))

        return fn

    def example_batch(self, batch_size: int, phase) -> dict:
        out = super().example_batch(batch_size, phase)
        return dict(out, prefix=np.zeros((batch_size, phase.seq_len), np.int32))

    def batch_stats(self, batch) -> dict:
        stats = super().batch_stats(batch)
        prefix, w = batch["prefix"] > 0, batch["loss_weights"] > 0
        # a target inside the prefix is seen by the prefix's own attention: must be 0
        return dict(stats, targets=int(w.sum()), prefix_tokens=int(prefix.sum()),
                    targets_in_prefix=int((w[:, :-1] & prefix[:, 1:]).sum()))

    def summarize_stats(self, totals, phase) -> dict:
        """prefix_fraction: the prefixes' share of the real tokens (1/2 on average)."""
        return dict(super().summarize_stats(totals, phase),
                    prefix_fraction=totals["prefix_tokens"] / max(totals["real_tokens"], 1),
                    targets_in_prefix=totals["targets_in_prefix"])


def entry(family: str, clm_class, recipe, clm_validate) -> contract.Entry:
    """The objective `<family>_prefixlm`: `clm_class`'s rows and every key of the family's
    causal-LM recipe (`recipe(name)`), the prefix bidirectional; distill.* for a
    teacher."""
    name = family + SUFFIX
    cls = type(family.capitalize() + "PrefixLm",
               (logit_distill.Distilled, Prefixed, clm_class), {})

    def defaults():
        c = recipe(name)
        c.distill = ml_collections.ConfigDict()
        logit_distill.defaults(c)
        return c

    def validate(cfg):
        if not cfg.model.causal:
            raise UserError(f"objective={name} attends causally after the prefix: set "
                            "model.causal=True")
        impl = cfg.model.get("attention_impl", "xla")
        if impl not in ("xla", "auto"):
            raise UserError(f"model.attention_impl={impl} has no PrefixLM mask (a "
                            f"bidirectional prefix); objective={name} needs xla or auto")
        logit_distill.validate(cfg)
        clm_validate(cfg)

    return contract.Entry(
        name=name, build=cls, defaults=defaults, validate=validate,
        imports=logit_distill.imports,
        as_pretrained=lambda model_cfg, params: (model_cfg,
                                                 logit_distill.student_params(params),
                                                 "causal_lm"),
        from_pretrained=lambda params, fresh: {"student": params} if "teacher" in fresh
        else params)
