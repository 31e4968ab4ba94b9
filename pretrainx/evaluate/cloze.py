"""Cloze knowledge probes (Petroni et al. 2019, LAMA): does a masked LM put the right
word in a blank? `python -m pretrainx.probe cloze --workdir=RUN --probes=FILE`.

A probe file is a TSV: a sentence with one blank written [MASK] (whatever the model's
mask token is), its answers separated by | (any of them counts), and an optional
category; # starts a comment. pretrainx/assets/probes/cloze.tsv is a small set across
categories. As in LAMA, an answer counts only where it is one whole-word piece of the
model's vocabulary (multi-piece answers would need a blank per piece); a probe with
no such answer is skipped, and the count of skipped probes is reported beside the
scores. The blank's prediction ranks the whole vocabulary except the special tokens.
"""

import collections
import dataclasses
import pathlib

import numpy as np

from pretrainx import registry
from pretrainx.errors import UserError

BLANK = "[MASK]"
DEFAULT_PROBES = str(pathlib.Path(__file__).parents[1] / "assets" / "probes" / "cloze.tsv")


@dataclasses.dataclass(frozen=True)
class Probe:
    left: str
    right: str
    answers: tuple
    category: str


def read_probes(path: str) -> list:
    """The probes of a TSV file; a malformed line is refused naming file and line."""
    try:
        lines = pathlib.Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise UserError(f"cannot read the probe file {path}: {e.strerror or e}") from None
    probes = []
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = line.split("\t")
        where = f"{path}:{number}"
        if len(fields) not in (2, 3):
            raise UserError(f"{where}: expected sentence<TAB>answers[<TAB>category], got "
                            f"{len(fields)} fields")
        sentence, answers = fields[0], [a.strip() for a in fields[1].split("|") if a.strip()]
        if sentence.count(BLANK) != 1:
            raise UserError(f"{where}: a probe needs exactly one {BLANK}, this one has "
                            f"{sentence.count(BLANK)}")
        if not answers:
            raise UserError(f"{where}: no answer given")
        left, right = sentence.split(BLANK)
        category = fields[2].strip() if len(fields) == 3 and fields[2].strip() else "all"
        probes.append(Probe(left.rstrip(), right.rstrip(), tuple(answers), category))
    if not probes:
        raise UserError(f"{path} holds no probes")
    return probes


def _after_a_word(tokenizer, text: str) -> list:
    """The ids of `text` as they follow a word in running text (a byte-level BPE gives
    a word after a space another piece than at the start of a text)."""
    return tokenizer.encode("a" + text)[len(tokenizer.encode("a")):]


def answer_ids(tokenizer, answers) -> list:
    """The ids of the answers that are one whole-word piece (LAMA's single-token rule),
    as each follows a space in a sentence."""
    ids = []
    for answer in answers:
        pieces = _after_a_word(tokenizer, " " + answer)
        if len(pieces) == 1 and tokenizer.word_start_mask(np.asarray(pieces))[0]:
            ids.append(int(pieces[0]))
    return ids


def ranks(logits: np.ndarray, targets: list, excluded: np.ndarray) -> int:
    """0-based rank of the best-ranked target among the vocabulary, special ids left
    out (ties counted against the target)."""
    scores = np.array(logits, np.float64)
    best = max(scores[t] for t in targets)
    scores[excluded] = -np.inf
    scores[targets] = -np.inf
    return int(np.sum(scores >= best))


def score(model, probes, batch_size: int = 64) -> dict:
    """Precision@1 and @10 over the probes `model` (a `pretrainx.load` Model of a
    masked LM) can answer, overall and per category, with the counts used and skipped."""
    tokenizer = model.tokenizer
    if registry.samples(model.family, model.pretrained.model) or tokenizer.mask_id < 0:
        raise UserError(f"a {model.pretrained.family} model has no [MASK] to fill: cloze "
                        "probes need a masked LM")
    excluded = tokenizer.special_ids()
    rows, targets, kept = [], [], []
    for probe in probes:
        ids = answer_ids(tokenizer, probe.answers)
        if not ids:
            continue
        left, right = tokenizer.encode(probe.left), _after_a_word(tokenizer, probe.right)
        rows.append(([tokenizer.cls_id] + left + [tokenizer.mask_id] + right
                     + [tokenizer.sep_id], len(left) + 1))
        targets.append(ids)
        kept.append(probe)
    found = []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start:start + batch_size]
        logits = model(ids=[ids for ids, _ in chunk])["logits"]
        found += [ranks(logits[i, at], targets[start + i], excluded)
                  for i, (_, at) in enumerate(chunk)]
    by_category = collections.defaultdict(list)
    for probe, rank in zip(kept, found):
        by_category[probe.category].append(rank)
    skipped = collections.Counter(p.category for p in probes) - collections.Counter(
        p.category for p in kept)

    def summary(found_ranks):
        r = np.asarray(found_ranks)
        return {"precision_at_1": float(np.mean(r < 1)) if r.size else None,
                "precision_at_10": float(np.mean(r < 10)) if r.size else None,
                "probes": int(r.size)}
    return {**summary(found), "skipped": len(probes) - len(kept),
            "categories": {c: dict(summary(by_category.get(c, [])), skipped=skipped.get(c, 0))
                           for c in sorted({p.category for p in probes})}}
