"""UL2's mixture of denoisers (Tay et al. 2022) on numpy token arrays.

Each raw example is given to one denoiser, drawn by weight:

* R and X: T5's span corruption (objectives/spans.py) at the denoiser's noise density
  and mean span length; R regular (15%, spans of 3 or 8), X extreme (long spans or a
  high rate).
* S: sequential PrefixLM, as t5.data.preprocessors.prefix_lm: the inputs are a prefix
  of length uniform in [1, n - 1], the targets the rest.

Each kind's mode token ([NLU] for R, [NLG] for X, [S2S] for S) is encoded by the
tokenizer and put before the inputs, as UL2's ul2_objective does with
optional_task_prefixes. The paper's mixture is UL2_DENOISERS with UL2_WEIGHTS: R and X
40% each, S 20% (section 4.5), split evenly inside a kind.

Config keys (data.*): `denoisers` "KIND:MEAN_SPAN:DENSITY,...,S", `denoiser_weights`
one weight each, `mode_tokens` "R=[NLU],X=[NLG],S=[S2S]" ("" for none).
"""

import dataclasses

import numpy as np

from pretrainx.errors import UserError
from pretrainx.objectives import spans

UL2_DENOISERS = "R:3:0.15,R:8:0.15,X:3:0.5,X:8:0.5,X:64:0.15,X:64:0.5,S"
UL2_WEIGHTS = "0.2,0.2,0.1,0.1,0.1,0.1,0.2"
UL2_MODE_TOKENS = "R=[NLU],X=[NLG],S=[S2S]"
KINDS = ("R", "X", "S")


@dataclasses.dataclass(frozen=True)
class Denoiser:
    kind: str  # R, X (span corruption) or S (PrefixLM)
    mean_span: float = 0.0
    density: float = 0.0

    @property
    def name(self) -> str:
        return "S" if self.kind == "S" else f"{self.kind}:{self.mean_span:g}:{self.density:g}"


def parse_denoisers(text: str) -> list:
    """data.denoisers -> [Denoiser]; one line naming the entry at fault otherwise."""
    out = []
    for entry in (e.strip() for e in str(text).split(",")):
        kind, *args = entry.split(":")
        if kind == "S" and not args:
            out.append(Denoiser("S"))
            continue
        try:
            mean_span, density = (float(a) for a in args)
        except ValueError:
            mean_span = density = None
        if kind not in ("R", "X") or mean_span is None:
            raise UserError(f"data.denoisers: {entry!r} is not R:MEAN_SPAN:DENSITY, "
                            "X:MEAN_SPAN:DENSITY or S")
        if mean_span < 1 or not 0 < density < 1:
            raise UserError(f"data.denoisers: {entry!r} needs a mean span >= 1 and a "
                            "density in (0, 1)")
        out.append(Denoiser(kind, mean_span, density))
    return out


def parse_weights(text: str, count: int) -> np.ndarray:
    """data.denoiser_weights -> probabilities summing to 1."""
    try:
        weights = np.asarray([float(w) for w in str(text).split(",")], np.float64)
    except ValueError:
        raise UserError(f"data.denoiser_weights={text!r} is not a list of numbers") from None
    if weights.size != count:
        raise UserError(f"data.denoiser_weights has {weights.size} weights for {count} "
                        "data.denoisers")
    if (weights < 0).any() or not weights.sum() > 0:
        raise UserError(f"data.denoiser_weights={text!r} must be >= 0 and sum to a "
                        "positive value")
    return weights / weights.sum()


def parse_mode_tokens(text: str) -> dict:
    """data.mode_tokens "R=[NLU],X=[NLG],S=[S2S]" -> {kind: text}; "" -> none."""
    out = {}
    for entry in filter(None, (e.strip() for e in str(text).split(","))):
        kind, sep, token = entry.partition("=")
        if kind not in KINDS or not sep or not token:
            raise UserError(f"data.mode_tokens: {entry!r} is not KIND=TOKEN with KIND "
                            f"one of {', '.join(KINDS)}")
        out[kind] = token
    return out


def token_ids(token: str, tokenizer, key: str = "data.mode_tokens") -> np.ndarray:
    """int32 ids of a mode token, refusing (naming `key`) one the vocabulary lacks."""
    ids = np.asarray(tokenizer.encode(token), np.int32)
    if ids.size == 0 or (ids == tokenizer.unk_id).any():
        raise UserError(
            f"{key}: {token!r} is not in the vocabulary of {tokenizer.path} "
            "(it encodes to <unk>); train one that keeps it whole: python -m "
            f"pretrainx.tokenizer train ... --user_symbols={token}")
    return ids


def mode_ids(mode_tokens: dict, tokenizer) -> dict:
    """{kind: int32 ids of its mode token}, refusing a token the vocabulary lacks."""
    return {kind: token_ids(token, tokenizer) for kind, token in mode_tokens.items()}


def raw_length(denoiser: Denoiser, inputs_length: int, mode_length: int) -> int:
    """Raw tokens of one example, so that its inputs (mode token and EOS included) come
    to `inputs_length`, as ul2_objective sizes each denoiser with random_spans_helper."""
    room = inputs_length - mode_length
    if denoiser.kind == "S":
        return room - 1  # the prefix and EOS fit even when the prefix is all but one token
    return spans.random_spans_helper(room, denoiser.density, denoiser.mean_span)[0]


def max_spans(denoiser: Denoiser, length: int) -> int:
    return 0 if denoiser.kind == "S" else spans.noise_counts(
        length, denoiser.density, denoiser.mean_span)[1]


def draw_prefix(length: int, rng) -> int:
    """PrefixLM's split, as random_prefix_noise_mask: uniform in [1, length - 1]."""
    return int(rng.integers(1, length)) if length >= 2 else 0


def lengths(denoiser: Denoiser, length: int, prefix: int, mode_length: int):
    """(inputs, targets) lengths, EOS and mode token included, known before the draw."""
    if denoiser.kind == "S":
        return mode_length + prefix + 1, length - prefix + 1
    inputs, targets = spans.corrupted_lengths(length, denoiser.density, denoiser.mean_span)
    return mode_length + inputs, targets


def denoise(tokens: np.ndarray, denoiser: Denoiser, prefix: int, mode: np.ndarray, rng,
            sentinels: np.ndarray, eos_id: int):
    """(inputs, targets) of one raw example: the mode token, then the denoiser's inputs
    ending in EOS; its targets ending in EOS."""
    eos = np.asarray([eos_id], np.int32)
    if denoiser.kind == "S":
        inputs, targets = np.concatenate([tokens[:prefix], eos]), np.concatenate(
            [tokens[prefix:], eos])
    else:
        inputs, targets = spans.span_corrupt(
            tokens, rng, noise_density=denoiser.density,
            mean_noise_span_length=denoiser.mean_span, sentinels=sentinels, eos_id=eos_id)
    return np.concatenate([mode, inputs]).astype(np.int32), targets.astype(np.int32)


def split_stream(stream: np.ndarray, raw_lengths, probabilities, rng):
    """Cuts a token stream into raw examples, each of the length of a denoiser drawn by
    `probabilities`: [(tokens, denoiser index)]."""
    out, start = [], 0
    while start < stream.size:
        k = int(rng.choice(len(probabilities), p=probabilities))
        piece = stream[start:start + raw_lengths[k]]
        out.append((piece, k))
        start += piece.size
    return out
