"""Retrieval over a user's corpus and queries (pretrainx/evaluate/retrieval.py, BEIR's layout), and
the embedding probes (sts, retrieval) that score a checkpoint with no fine-tuning."""

import json
import shutil

import numpy as np
import pytest

from cli_fork import run_module
from conftest import ALICE, REPO
from pretrainx.trained import inference
from pretrainx.evaluate import retrieval, similarity
from pretrainx.evaluate import probe as probe_lib
from pretrainx.data import text as text_lib
from pretrainx.errors import UserError

TEACHER = REPO / "tests" / "fixtures" / "quickstart_teacher_900"  # the quickstart at step 900


def beir_from_alice(folder, count: int = 60, same_text: bool = False):
    """A BEIR folder from Alice's paragraphs of three or more sentences (a book the
    quickstart never trained on): each query is a paragraph's first sentence, its one
    relevant document the rest of that paragraph (or, same_text, the sentence itself);
    a first sentence seen before is skipped."""
    raw = text_lib.strip_gutenberg(open(ALICE, encoding="utf-8").read())
    pairs, seen = [], set()
    for paragraph in text_lib.paragraphs(raw):
        sentences = text_lib.split_sentences(paragraph)
        if len(sentences) >= 3 and sentences[0] not in seen:  # one "Down, down, down."
            seen.add(sentences[0])
            pairs.append((sentences[0], sentences[0] if same_text else " ".join(sentences[1:])))
    pairs = pairs[:count]
    (folder / "qrels").mkdir(parents=True)
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as f:
        for i, (_, doc) in enumerate(pairs):
            f.write(json.dumps({"_id": f"d{i}", "title": "", "text": doc}) + "\n")
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as f:
        for i, (query, _) in enumerate(pairs):
            f.write(json.dumps({"_id": f"q{i}", "text": query}) + "\n")
    with open(folder / "qrels" / "test.tsv", "w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        f.writelines(f"q{i}\td{i}\t1\n" for i in range(len(pairs)))
    return len(pairs)


def test_ranks_are_scored_as_mrr_and_recall_at_10():
    """By hand: 12 documents on the unit circle; query a's relevant document ranks
    first, b's two relevant ones rank 2nd and 12th, c's only one 11th (past 10: 0)."""
    angles = np.linspace(0, np.pi, 12)  # document j at angle j*pi/11
    docs = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    queries = docs[[0, 0, 0]]
    ids = [f"d{j}" for j in range(12)]
    relevant = {"a": {"d0"}, "b": {"d1", "d11"}, "c": {"d10"}}
    got = retrieval.rank_scores(queries, docs, ["a", "b", "c"], ids, relevant)
    assert got["mrr_at_10"] == pytest.approx((1 + 1 / 2 + 0) / 3)
    assert got["recall_at_10"] == pytest.approx((1 + 1 / 2 + 0) / 3)


@pytest.mark.slow
def test_a_pretrained_encoder_retrieves_from_a_corpus_built_from_the_bundled_text(tmp_path):
    """The command on Alice: a query that is its document's own text is found first
    every time; the quickstart's small model finds each paragraph from its first
    sentence above chance (over 60 documents chance is MRR@10 0.049 and recall@10
    0.167; measured 0.079 and 0.233)."""
    same = tmp_path / "same"
    n = beir_from_alice(same, same_text=True)
    out = run_module("pretrainx.evaluate.retrieval", [f"--workdir={TEACHER}", f"--data={same}"],
                     cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    record = json.loads(out.stdout.strip().splitlines()[-1])
    assert (record["queries"], record["documents"]) == (n, n) == (60, 60)
    assert record["mrr_at_10"] == record["recall_at_10"] == 1.0
    rest = tmp_path / "rest"
    beir_from_alice(rest)
    got = retrieval.evaluate(inference.load(str(TEACHER)), str(rest))
    chance = sum(1 / r for r in range(1, 11)) / 60
    assert got["mrr_at_10"] > 1.3 * chance and got["recall_at_10"] > 1.3 * 10 / 60, got


def test_bad_folders_are_named_in_one_line(tmp_path):
    folder = tmp_path / "beir"
    beir_from_alice(folder, count=5)
    with open(folder / "qrels" / "test.tsv", "a", encoding="utf-8") as f:
        f.write("q1\tnowhere\t1\n")
    with pytest.raises(UserError, match=r"test.tsv names corpus id 'nowhere'"):
        retrieval.read_folder(str(folder))
    with pytest.raises(UserError, match=r"qrels/dev.tsv not found"):
        retrieval.read_folder(str(folder), "dev")
    (folder / "queries.jsonl").write_text('{"text": "no id"}\n', encoding="utf-8")
    with pytest.raises(UserError, match=r"queries.jsonl line 1: not a JSON object with _id"):
        retrieval.read_folder(str(folder))


@pytest.mark.slow
def test_embedding_probes_score_a_checkpoint_without_training(
        shared_data, pretrained_workdir, tmp_path):
    """Tasks sts and retrieval: a record of the checkpoint's zero-shot scores (the same
    figures as the commands give), nothing fine-tuned, at the checkpoint's step; task
    contrastive trains the embedder on STS-B's pairs first and reports STS-B dev."""
    workdir = tmp_path / "run"
    shutil.copytree(pretrained_workdir, workdir)
    step = probe_lib.checkpoint_steps(str(workdir))[-1]
    beir = tmp_path / "beir"
    beir_from_alice(beir)
    model = inference.load(str(workdir / "checkpoints" / str(step)))
    sts = probe_lib.settings(str(workdir), "sts", str(shared_data / "glue"))
    record = probe_lib.probe_step(str(workdir), step, sts)
    assert record["spearman"] == pytest.approx(
        similarity.sts(model, str(shared_data / "glue"), "mean")["spearman"])
    assert (record["task"], record["step"], record["pairs"]) == ("sts", step, 1500)
    shutil.rmtree(workdir / "probe")
    found = probe_lib.settings(str(workdir), "retrieval", retrieval_dir=str(beir))
    record = probe_lib.probe_step(str(workdir), step, found)
    assert record["mrr_at_10"] == pytest.approx(retrieval.evaluate(model, str(beir))["mrr_at_10"])
    assert (record["queries"], record["documents"]) == (60, 60)
    assert not (workdir / "probe" / str(step) / "finetune").exists()
    shutil.rmtree(workdir / "probe")
    tuned = probe_lib.settings(str(workdir), "contrastive", str(shared_data / "glue"))
    tuned.update(max_train_examples=96, holdout_examples=32, epochs=1, seq_len=32,
                 global_batch_size=16)
    record = probe_lib.probe_step(str(workdir), step, tuned)  # STS-B after training
    assert record["task"] == "contrastive" and -1 <= record["spearman"] <= 1
    assert (workdir / "probe" / str(step) / "finetune" / "best").exists()
