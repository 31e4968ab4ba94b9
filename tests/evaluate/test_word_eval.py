"""python -m pretrainx.word_eval: WordSim-353, SimLex-999 and the analogy questions
scored as gensim scores them (the same numbers on the same vectors), and the CLI."""

import json

import numpy as np
import pytest

from cli_fork import run_module
from pretrainx.evaluate import word_eval
from pretrainx.errors import UserError

gensim = pytest.importorskip("gensim")


def _vectors(tmp_path, dim=16):
    """Every word of the three sets (some also in another casing, later in the file)
    with random vectors, except that each country of capital-common-countries is its
    capital plus one shared offset: 3CosAdd answers those. Returns the file and words."""
    from gensim.test.utils import datapath
    rng = np.random.default_rng(0)
    words, vectors = [], {}
    for name in ("wordsim353.tsv", "simlex999.txt"):
        for a, b, _ in word_eval.read_pairs(datapath(name)):
            words += [a, b]
    capitals = []
    with open(datapath("questions-words.txt"), encoding="utf-8") as f:
        section = None
        for line in f:
            if line.startswith(":"):
                section = line.strip()
                continue
            question = line.split()
            words += question
            if section == ": capital-common-countries":
                capitals += [question[:2], question[2:]]
    words = list(dict.fromkeys(words))
    words += [w.upper() for w in words[::7]]  # later casings: the first one wins
    words = list(dict.fromkeys(words))
    offset = rng.normal(size=dim)
    for w in words:
        vectors[w] = rng.normal(size=dim)
    for capital, country in capitals:
        vectors[country] = vectors[capital] + 3 * offset + 0.1 * rng.normal(size=dim)
    path = tmp_path / "vectors.txt"
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"{len(words)} {dim}\n")
        for w in words:
            f.write(w + " " + " ".join(f"{x:.6f}" for x in vectors[w]) + "\n")
    return str(path), words


def test_scores_are_gensims_on_the_same_vectors(tmp_path):
    from gensim.models import KeyedVectors
    from gensim.test.utils import datapath
    path, words = _vectors(tmp_path)
    restrict = len(words) - 200  # the last words are left out, as gensim's restrict_vocab
    ours = word_eval.evaluate(path, restrict=restrict)
    kv = KeyedVectors.load_word2vec_format(path)
    for name, file in (("wordsim", "wordsim353.tsv"), ("simlex", "simlex999.txt")):
        pearson, spearman, oov = kv.evaluate_word_pairs(datapath(file), restrict_vocab=restrict)
        assert ours[name]["spearman"] == pytest.approx(spearman[0], abs=1e-6)
        assert ours[name]["pearson"] == pytest.approx(pearson[0], abs=1e-6)
        assert 100 * ours[name]["oov"] == pytest.approx(oov, abs=1e-6)
    score, sections = kv.evaluate_word_analogies(datapath("questions-words.txt"),
                                                 restrict_vocab=restrict)
    assert ours["analogies"]["accuracy"] == pytest.approx(score, abs=1e-9)
    theirs = {s["section"]: len(s["correct"]) / max(len(s["correct"]) + len(s["incorrect"]), 1)
              for s in sections if s["section"] != "Total accuracy"}
    for name, accuracy in ours["analogies"]["sections"].items():
        assert accuracy == pytest.approx(theirs[name], abs=1e-9), name
    assert ours["analogies"]["sections"]["capital-common-countries"] > 0.5  # 0.67


def test_the_cli_prints_one_json_line_and_refuses_bad_input(tmp_path):
    path, _ = _vectors(tmp_path)
    out = run_module("pretrainx.evaluate.word_eval", [f"--vectors={path}", "--restrict=2000"])
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(result) == {"words", "wordsim", "simlex", "analogies"}
    (tmp_path / "bad.txt").write_text("3 4\nword 1 2 3 4\n", encoding="utf-8")
    with pytest.raises(UserError, match="header says 3 words, it holds 1"):
        word_eval.evaluate(str(tmp_path / "bad.txt"))
    with pytest.raises(UserError, match="--simlex=/nowhere: no such file"):
        word_eval.evaluate(path, simlex="/nowhere")
