"""python -m pretrainx.word_eval --vectors=DIR/vectors.txt [--wordsim=F] [--simlex=F]
    [--analogies=F] [--restrict=300000]

Static word vectors (word2vec.c's text format, what `pretrainx.trained.export` writes for a
word2vec run) scored as the word-vector papers score them, with gensim's rules:

- WordSim-353 and SimLex-999: the Spearman (and Pearson) correlation of the vectors'
  cosine similarity with the human scores, over the pairs whose two words are among
  the first `--restrict` words of the file (compared case-insensitively, the first
  casing in the file winning); `oov` is the share of pairs left out.
- Mikolov et al.'s analogies (questions-words.txt, "a b c d": a is to b as c is to d):
  3CosAdd, the word nearest to b - a + c by cosine among the first `--restrict` words,
  a, b and c excluded; accuracy over the questions whose four words are there, overall
  and per section (capital-common-countries, gram1-adjective-to-adverb, ...).

The sets are read from the files given, or from gensim's copies of them
(gensim/test/test_data) when gensim is installed. Prints one JSON line.
"""

import argparse
import os

import numpy as np
from scipy import stats

from pretrainx.errors import UserError, json_command

SETS = {"wordsim": "wordsim353.tsv", "simlex": "simlex999.txt",
        "analogies": "questions-words.txt"}


def read_vectors(path: str) -> tuple:
    """(words, [count, dim] float32 vectors) of a word2vec.c text file."""
    try:
        with open(path, encoding="utf-8") as f:
            count, dim = (int(x) for x in f.readline().split())
            words, rows = [], []
            for line in f:
                parts = line.rstrip("\n").split(" ")
                words.append(parts[0])
                rows.append(np.asarray(parts[1:dim + 1], np.float32))
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read word vectors {path}: {e}") from None
    if len(words) != count:
        raise UserError(f"{path}: its header says {count} words, it holds {len(words)}")
    return words, np.stack(rows)


def _index(words: list, restrict: int) -> dict:
    """UPPER-CASED word -> row among the first `restrict` words, the first casing
    winning (gensim's case_insensitive vocabulary)."""
    index = {}
    for i, word in enumerate(words[:restrict]):
        index.setdefault(word.upper(), i)
    return index


def _unit(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def read_pairs(path: str) -> list:
    """(word, word, score) of a tab-separated similarity file, # lines skipped."""
    pairs = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            a, b, score = line.rstrip("\n").split("\t")[:3]
            pairs.append((a, b, float(score)))
    return pairs


def pair_scores(words: list, vectors: np.ndarray, pairs: list, restrict: int) -> dict:
    """Spearman and Pearson of cosine similarity against the human scores."""
    index, unit = _index(words, restrict), _unit(vectors)
    found = [(index[a.upper()], index[b.upper()], s) for a, b, s in pairs
             if a.upper() in index and b.upper() in index]
    out = {"pairs": len(found), "oov": 1 - len(found) / max(len(pairs), 1)}
    if len(found) < 3:
        return dict(out, spearman=float("nan"), pearson=float("nan"))
    left, right, human = (np.asarray(x) for x in zip(*found))
    cosine = (unit[left] * unit[right]).sum(1)
    return dict(out, spearman=float(stats.spearmanr(human, cosine)[0]),
                pearson=float(stats.pearsonr(human, cosine)[0]))


def analogy_accuracy(words: list, vectors: np.ndarray, path: str, restrict: int) -> dict:
    """3CosAdd accuracy over questions-words.txt's answerable questions."""
    index, unit = _index(words, restrict), _unit(vectors[:restrict])
    keys = [w.upper() for w in words[:restrict]]
    sections, section, skipped = {}, None, 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith(":"):
                section = line[1:].strip()
                continue
            question = line.upper().split()
            if len(question) != 4:
                continue
            if any(w not in index for w in question):
                skipped += 1
                continue
            a, b, c, expected = question
            scores = unit @ (unit[index[b]] + unit[index[c]] - unit[index[a]])
            scores[[index[a], index[b], index[c]]] = -np.inf
            top = np.argsort(-scores)[:5]
            predicted = next((keys[i] for i in top if keys[i] not in (a, b, c)), None)
            right, total = sections.get(section, (0, 0))
            sections[section] = (right + (predicted == expected), total + 1)
    answered = sum(total for _, total in sections.values())
    correct = sum(right for right, _ in sections.values())
    return {"accuracy": correct / answered if answered else float("nan"),
            "questions": answered, "skipped": skipped,
            "sections": {name: right / total for name, (right, total) in sections.items()}}


def default_set(name: str) -> str:
    """gensim's copy of an evaluation set, or a one-line error."""
    try:
        from gensim.test.utils import datapath
    except ImportError:
        raise UserError(f"--{name} is needed (or gensim installed, whose test data holds "
                        f"{SETS[name]})") from None
    return datapath(SETS[name])


def evaluate(vectors_path: str, wordsim: str = "", simlex: str = "", analogies: str = "",
             restrict: int = 300_000) -> dict:
    words, vectors = read_vectors(vectors_path)
    out = {"words": len(words)}
    for name, path in (("wordsim", wordsim), ("simlex", simlex)):
        path = path or default_set(name)
        if not os.path.isfile(path):
            raise UserError(f"--{name}={path}: no such file")
        out[name] = pair_scores(words, vectors, read_pairs(path), restrict)
    path = analogies or default_set("analogies")
    if not os.path.isfile(path):
        raise UserError(f"--analogies={path}: no such file")
    out["analogies"] = analogy_accuracy(words, vectors, path, restrict)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pretrainx.word_eval", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vectors", required=True, help="a word2vec.c text file")
    for name in SETS:
        parser.add_argument(f"--{name}", default="", help=f"{SETS[name]} (gensim's if empty)")
    parser.add_argument("--restrict", type=int, default=300_000,
                        help="only the file's first this many words take part (gensim's)")
    args = parser.parse_args(argv)
    return json_command(lambda: evaluate(args.vectors, args.wordsim, args.simlex,
                                         args.analogies, args.restrict))


if __name__ == "__main__":
    raise SystemExit(main())
