"""Cloze knowledge probes (pretrainx/evaluate/cloze.py): blanks of real sentences scored as
LAMA scores them, by the command, and as a probe task while pretraining."""

import json
import re

import numpy as np
import pytest

from cli_fork import run_module
from conftest import ALICE, REPO, tiny_bert_config
from pretrainx.evaluate import cloze
from pretrainx.compare import notebook
from pretrainx.errors import UserError

# The quickstart's BERT-Tiny after 900 steps on the bundled books, Alice unseen
# (tests/families/test_distil.py says how it was made).
TEACHER = str(REPO / "tests" / "fixtures" / "quickstart_teacher_900")


def _alice_blanks(count: int) -> list:
    """`count` sentences of Alice (unseen by the teacher) with their middle word blanked,
    where that word is plain letters followed by a space."""
    text = " ".join(open(ALICE, encoding="utf-8").read().split())
    probes = []
    for sentence in re.split(r"(?<=[.!?])\s+", text[2000:]):
        words = sentence.split(" ")
        middle = len(words) // 2
        if not 8 <= len(words) <= 30 or not re.fullmatch(r"[a-z]+", words[middle]):
            continue
        probes.append(cloze.Probe(" ".join(words[:middle]), " " + " ".join(words[middle + 1:]),
                                  (words[middle],), "alice"))
        if len(probes) == count:
            break
    return probes


@pytest.fixture(scope="module")
def teacher():
    import pretrainx
    return pretrainx.load(TEACHER)


def test_context_fills_blanks_of_unseen_text_and_agrees_with_fill_mask(teacher):
    """With its sentence the teacher ranks the missing word far better than with the
    blank alone (measured p@1 0.113 and p@10 0.351 over 151 probes, against 0 and 0),
    and a probe counts at @1 exactly where
    notebook.fill_mask's likeliest piece is the answer."""
    probes = _alice_blanks(160)
    seen = cloze.score(teacher, probes)
    alone = cloze.score(teacher, [cloze.Probe("", "", p.answers, p.category) for p in probes])
    assert seen["probes"] == alone["probes"] > 120, seen
    assert seen["precision_at_1"] > alone["precision_at_1"] + 0.05, (seen, alone)
    assert seen["precision_at_10"] > alone["precision_at_10"] + 0.1, (seen, alone)
    assert seen["categories"]["alice"]["precision_at_10"] == seen["precision_at_10"]
    tokenizer = teacher.tokenizer
    few = [p for p in probes if cloze.answer_ids(tokenizer, p.answers)][:24]
    filled = notebook.fill_mask(TEACHER, [f"{p.left} [MASK]{p.right}" for p in few], top_k=1)
    hits = [f["predictions"][0][0][0].strip() == p.answers[0] for f, p in zip(filled, few)]
    one_by_one = [cloze.score(teacher, [p])["precision_at_1"] == 1.0 for p in few]
    assert hits == one_by_one and any(hits), hits


def test_ranks_leave_special_ids_out_and_count_ties_against_the_answer():
    logits = np.array([9.0, 1.0, 5.0, 5.0, 3.0])
    assert cloze.ranks(logits, [2], np.array([0])) == 1  # 0 is special; 3 ties with 2
    assert cloze.ranks(logits, [4, 3], np.array([0])) == 1  # the better answer counts
    assert cloze.ranks(logits, [1], np.array([], int)) == 4


def test_the_shipped_set_reports_every_category_and_what_it_skipped(teacher):
    probes = cloze.read_probes(cloze.DEFAULT_PROBES)
    categories = {"verbs", "prepositions", "commonsense", "time", "places", "arithmetic",
                  "chemistry"}
    assert {p.category for p in probes} == categories and len(probes) >= 70
    out = cloze.score(teacher, probes)
    assert set(out["categories"]) == categories
    # "hydrogen", "dioxide", ... are several pieces of the books' 4k vocabulary
    assert out["skipped"] == sum(c["skipped"] for c in out["categories"].values()) > 0
    assert out["probes"] + out["skipped"] == len(probes)


@pytest.mark.parametrize("line, says", [
    ("No blank here.\tword\tverbs", "exactly one [MASK]"),
    ("Two [MASK] and [MASK].\tword", "exactly one [MASK], this one has 2"),
    ("A [MASK] without answers.\t |  \tverbs", "no answer"),
    ("Only a sentence [MASK].", "got 1 fields")])
def test_a_bad_probe_line_is_refused_naming_its_file_and_line(tmp_path, line, says):
    path = tmp_path / "probes.tsv"
    path.write_text("# a comment\nThe [MASK] sat.\tcat\tanimals\n" + line + "\n")
    with pytest.raises(UserError, match=re.escape(f"{path}:3: ") + ".*" + re.escape(says)):
        cloze.read_probes(str(path))


def test_the_command_scores_an_hf_folder_and_names_a_missing_probe_file(tmp_path):
    probes = tmp_path / "probes.tsv"
    probes.write_text("Alice was beginning to get very tired of sitting by her sister on "
                      "[MASK] bank.\tthe\tbook\n")
    out = run_module("pretrainx.evaluate.probe", ["cloze", f"--workdir={TEACHER}", f"--probes={probes}"])
    assert out.returncode == 0, out.stderr[-2000:]
    record = json.loads(out.stdout.strip().splitlines()[-1])
    assert record["task"] == "cloze" and record["probes"] == 1
    assert record["categories"]["book"]["precision_at_10"] == record["precision_at_10"]
    bad = run_module("pretrainx.evaluate.probe", ["cloze", f"--workdir={TEACHER}",
                                         f"--probes={tmp_path / 'missing.tsv'}"])
    assert bad.returncode != 0 and "missing.tsv" in bad.stderr.strip().splitlines()[-1]


def test_cloze_is_a_probe_task_of_a_run_that_needs_no_glue(pretrained_workdir, tmp_path):
    """probe.task=cloze passes the config's checks without a GLUE folder, and a probe of a
    checkpoint (what the run's background probe does at every probe.every_steps) writes
    its record beside the fine-tuning probes' (tests/evaluate/test_probe.py runs that path)."""
    import shutil
    from pretrainx import config as config_lib
    from pretrainx.evaluate import probe as probe_lib
    cfg = tiny_bert_config(checkpoint_every=3, **{"probe.every_steps": 3,
                                                  "probe.task": "cloze"})
    config_lib.validate_shared(cfg)  # raised without a GLUE folder before cloze
    workdir = tmp_path / "run"
    shutil.copytree(pretrained_workdir, workdir)
    step = probe_lib.checkpoint_steps(str(workdir))[-1]
    record = probe_lib.probe_step(str(workdir), step, probe_lib.settings(str(workdir), "cloze"))
    assert record["task"] == "cloze" and record["step"] == step
    assert 0 <= record["precision_at_1"] <= record["precision_at_10"] <= 1
    assert set(record["categories"]) >= {"verbs", "places", "chemistry"}
    saved = json.loads((workdir / "probe" / str(step) / "probe.json").read_text())
    assert saved == record
