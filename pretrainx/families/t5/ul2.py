"""UL2 pretraining of the T5 encoder-decoder (Tay et al. 2022): the mixture of denoisers
of objectives/ul2.py on T5's data recipe and packing.

Documents are chunked and joined as span corruption's; the joined stream is cut into
raw examples one at a time, each the length its drawn denoiser needs for inputs of
`seq_len` (mode token and EOS included). The denoiser of each example and an S
example's split are drawn when rows are planned (once, from the seed: packing needs the
lengths); R and X examples' spans are drawn afresh every epoch, as T5's. Rows hold
`seq_len` inputs and `data.targets_length` targets (UL2: 512 and 512).
"""

import numpy as np

from pretrainx.data import packing
from pretrainx.errors import UserError
from pretrainx.families.t5 import span_corruption
from pretrainx.objectives import logit_distill, ul2


class Ul2(span_corruption.SpanCorruption):

    def __init__(self, cfg, tokenizer):
        super().__init__(cfg, tokenizer)
        data = cfg.data
        self.denoisers = ul2.parse_denoisers(data.denoisers)
        self.probabilities = ul2.parse_weights(data.denoiser_weights, len(self.denoisers))
        modes = ul2.parse_mode_tokens(data.mode_tokens)
        self.mode = {kind: np.zeros(0, np.int32) for kind in ul2.KINDS}
        if tokenizer is not None:
            self.mode.update(ul2.mode_ids(modes, tokenizer))
        else:  # deviceless plans and shapes: only the lengths matter, one id a token
            self.mode.update({k: np.ones(1, np.int32) for k in modes})
        # a causal teacher (PrefixLM + KD, logit_distill) reads each example as one row
        self.teacher_rows = bool((cfg.get("distill") or {}).get("teacher"))

    def targets_length(self, phase) -> int:
        return int(self.cfg.data.targets_length or phase.seq_len)

    def raw_lengths(self, phase) -> list:
        """Raw tokens an example of each denoiser takes, checked against the row's targets
        and the sentinels (refused in one line rather than cut or reused)."""
        out = []
        for d in self.denoisers:
            mode = self.mode[d.kind].size
            if phase.seq_len - mode < 3:
                raise UserError(f"seq_len={phase.seq_len} leaves no room after the "
                                f"{d.kind} mode token ({mode} ids)")
            raw = ul2.raw_length(d, phase.seq_len, mode)
            targets = ul2.lengths(d, raw, 1, mode)[1]  # S's longest: a one-token prefix
            if targets > self.targets_length(phase):
                raise UserError(
                    f"denoiser {d.name} makes targets of {targets} tokens at seq_len="
                    f"{phase.seq_len}; data.targets_length={self.cfg.data.targets_length} "
                    "is shorter")
            if ul2.max_spans(d, raw) > self.cfg.data.num_sentinels:
                raise UserError(
                    f"denoiser {d.name} makes {ul2.max_spans(d, raw)} spans at seq_len="
                    f"{phase.seq_len}; raise data.num_sentinels="
                    f"{self.cfg.data.num_sentinels}")
            out.append(raw)
        return out

    def lengths(self, phase):
        """(the longest raw example, inputs length, targets length)."""
        return max(self.raw_lengths(phase)), phase.seq_len, self.targets_length(phase)

    def describe(self, phase) -> dict:
        return {"raw_tokens_per_example": dict(zip((d.name for d in self.denoisers),
                                                   self.raw_lengths(phase))),
                "inputs_length": phase.seq_len, "targets_length": self.targets_length(phase),
                "denoiser_probabilities": dict(zip((d.name for d in self.denoisers),
                                                   self.probabilities.round(4).tolist()))}

    # ---- data -------------------------------------------------------------
    def examples_from_documents(self, docs, phase, train: bool, group: int = 0) -> list:
        """Rows of raw examples as flat arrays (prepared storage keeps them as any
        example): their tokens end to end, and each one's length, denoiser and split."""
        raw_lengths = self.raw_lengths(phase)
        rng = self.plan_rng(phase, train, group)
        pieces = []
        for joined in self.joined_streams(docs, phase, train, rng):
            pieces.extend(ul2.split_stream(joined, raw_lengths, self.probabilities, rng))
        prefixes = [ul2.draw_prefix(x.size, rng) if self.denoisers[k].kind == "S" else 0
                    for x, k in pieces]
        sizes = []
        for (x, k), p in zip(pieces, prefixes):
            d = self.denoisers[k]
            sizes.append(ul2.lengths(d, x.size, p, self.mode[d.kind].size))
        plan = packing.plan_rows(sizes, (phase.seq_len, self.targets_length(phase)))
        return [{"tokens": np.concatenate([pieces[i][0] for i in row]).astype(np.int32),
                 "lengths": np.asarray([pieces[i][0].size for i in row], np.int32),
                 "denoisers": np.asarray([pieces[i][1] for i in row], np.int32),
                 "prefixes": np.asarray([prefixes[i] for i in row], np.int32)}
                for row in plan]

    def denoise_row(self, row, rng) -> list:
        """[(inputs, targets)] of a planned row, spans drawn with `rng`."""
        out, start = [], 0
        for n, k, prefix in zip(row["lengths"], row["denoisers"], row["prefixes"]):
            d = self.denoisers[int(k)]
            tokens = np.asarray(row["tokens"][start:start + int(n)], np.int32)
            out.append(ul2.denoise(tokens, d, int(prefix), self.mode[d.kind], rng,
                                   self.sentinels, self.eos_id))
            start += int(n)
        return out

    def transform(self, phase, train: bool):
        def fn(row, rng):
            pairs = self.denoise_row(row, rng)
            out = self.pack(pairs, phase)
            if self.teacher_rows:
                _, inputs_length, targets_length = self.lengths(phase)
                out.update(logit_distill.teacher_rows(pairs, inputs_length + targets_length,
                                                      targets_length))
            return out
        return fn

    def example_batch(self, batch_size: int, phase) -> dict:
        out = super().example_batch(batch_size, phase)
        if self.teacher_rows:
            _, inputs_length, targets_length = self.lengths(phase)
            for name in logit_distill.TEACHER_FEATURES:
                out[name] = np.ones((batch_size, inputs_length + targets_length), np.int32)
            out["teacher_index"] = np.zeros((batch_size, targets_length), np.int32)
        return out

    # ---- statistics (python -m pretrainx.data --stats) ----------------------
    def kind_of(self, inputs) -> str:
        """The mode (R, X or S) an example's inputs open with; "" when none matches."""
        for kind, ids in self.mode.items():
            if ids.size and inputs.size >= ids.size and (inputs[:ids.size] == ids).all():
                return kind
        return ""

    def batch_stats(self, batch) -> dict:
        """Per mode token (R, X, S; without mode tokens S, and R and X together as
        "none"): examples, noise tokens and spans, raw tokens (R and X), and the
        prefix's share of each S example's raw tokens."""
        out = {"real_tokens": int((batch["encoder_segment_ids"] > 0).sum()
                                  + (batch["decoder_segment_ids"] > 0).sum()),
               "all_tokens": batch["encoder_input_tokens"].size
               + batch["decoder_target_tokens"].size,
               "rows": batch["encoder_input_tokens"].shape[0], "examples": 0}
        for kind in ("R", "X", "none"):  # every key in every batch: the caller sums them
            for key in ("examples", "noise_tokens", "noise_spans", "raw_tokens"):
                out[f"{kind}_{key}"] = 0
        out.update(S_examples=0, S_prefix_share_sum=0.0)
        lo, hi = self.sentinels.min(), self.sentinels.max()
        for r in range(out["rows"]):
            enc_seg, dec_seg = batch["encoder_segment_ids"][r], batch["decoder_segment_ids"][r]
            for s in range(1, int(enc_seg.max()) + 1):
                inputs = batch["encoder_input_tokens"][r][enc_seg == s]
                targets = batch["decoder_target_tokens"][r][dec_seg == s]
                spans = int(((targets >= lo) & (targets <= hi)).sum())
                # without a mode token: S's targets are text alone, R's and X's have sentinels
                mode = self.kind_of(inputs)
                kind = mode or ("none" if spans else "S")
                body = inputs[self.mode[mode].size if mode else 0:]
                out["examples"] += 1
                add = {"examples": 1}
                if kind == "S":
                    prefix, rest = body.size - 1, targets.size - 1
                    add["prefix_share_sum"] = prefix / max(prefix + rest, 1)
                else:
                    noise = targets.size - spans - 1
                    kept = body.size - int(((body >= lo) & (body <= hi)).sum()) - 1
                    add.update(noise_tokens=noise, noise_spans=spans, raw_tokens=kept + noise)
                for key, value in add.items():
                    out[f"{kind}_{key}"] += value
        return out

    def summarize_stats(self, totals, phase) -> dict:
        out = {"inputs_length": phase.seq_len, "targets_length": self.targets_length(phase)}
        examples = sum(v for k, v in totals.items() if k.endswith("_examples"))
        for kind in ("R", "X", "none"):
            if totals.get(f"{kind}_examples"):
                out[f"{kind}_share"] = totals[f"{kind}_examples"] / examples
                out[f"{kind}_noise_density"] = (totals[f"{kind}_noise_tokens"]
                                                / max(totals[f"{kind}_raw_tokens"], 1))
                out[f"{kind}_mean_noise_span_length"] = (totals[f"{kind}_noise_tokens"]
                                                         / max(totals[f"{kind}_noise_spans"], 1))
        if totals.get("S_examples"):
            out["S_share"] = totals["S_examples"] / examples
            out["S_mean_prefix_share"] = totals["S_prefix_share_sum"] / totals["S_examples"]
        return out
