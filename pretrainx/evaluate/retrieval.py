"""python -m pretrainx.retrieval --workdir=DIR --data=FOLDER [--split=test] [--pooling=mean]

Retrieval, zero-shot: a stored encoder (a pretraining workdir, a fine-tuning one or an HF
directory) embeds a corpus and its queries (pretrainx.load(DIR).embed), each query ranks
every document by cosine similarity, and the ranking is scored against the relevance
judgements: MRR@10 (the reciprocal rank of the first relevant document, 0 past rank 10)
and recall@10 (the share of a query's relevant documents in its first 10), averaged over
the judged queries. The folder is BEIR's layout, which MTEB's retrieval tasks also
use: corpus.jsonl ({"_id", "title", "text"}; a title is put before its text),
queries.jsonl ({"_id", "text"}) and qrels/SPLIT.tsv (query-id, corpus-id, score, with a
header; a score above 0 is relevant). Prints one JSON line.
"""

import argparse
import os
import sys

import numpy as np

from pretrainx.trained import inference
from pretrainx.data import jsonl
from pretrainx.errors import UserError, json_command
from pretrainx.evaluate import similarity
from pretrainx.evaluate.similarity import embeddings

TOP = 10


def _read_jsonl(path: str, fields: tuple) -> dict:
    """{_id: record} of a BEIR JSONL file; a bad line is named."""
    if not os.path.isfile(path):
        raise UserError(f"{path} not found: a retrieval folder holds corpus.jsonl, "
                        "queries.jsonl and qrels/SPLIT.tsv (BEIR's layout)")
    out = {str(r["_id"]): r for r in jsonl.records(path, ("_id",), fields)}
    if not out:
        raise UserError(f"{path} holds no records")
    return out


def read_qrels(path: str) -> dict:
    """{query id: set of relevant corpus ids} of a BEIR qrels TSV (header first)."""
    if not os.path.isfile(path):
        raise UserError(f"{path} not found: give --split the name of a file in qrels/")
    relevant = {}
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            fields = line.rstrip("\n").split("\t")
            if line_no == 1 or not line.strip():
                continue
            if len(fields) != 3:
                raise UserError(f"{path} line {line_no}: expected query-id, corpus-id and "
                                f"score separated by tabs, got {len(fields)} fields")
            try:
                score = float(fields[2])
            except ValueError:
                raise UserError(f"{path} line {line_no}: score {fields[2]!r} is not a "
                                "number") from None
            if score > 0:
                relevant.setdefault(fields[0], set()).add(fields[1])
    if not relevant:
        raise UserError(f"{path} judges no document relevant")
    return relevant


def read_folder(folder: str, split: str = "test") -> tuple:
    """(corpus ids, corpus texts, query ids, query texts, relevant) of a BEIR folder,
    only the judged queries, and every judged id checked against the corpus."""
    corpus = _read_jsonl(os.path.join(folder, "corpus.jsonl"), ("title", "text"))
    queries = _read_jsonl(os.path.join(folder, "queries.jsonl"), ("text",))
    relevant = read_qrels(os.path.join(folder, "qrels", f"{split}.tsv"))
    for query, docs in relevant.items():
        if query not in queries:
            raise UserError(f"{folder}/qrels/{split}.tsv judges query {query!r}, which "
                            "queries.jsonl does not hold")
        missing = docs - corpus.keys()
        if missing:
            raise UserError(f"{folder}/qrels/{split}.tsv names corpus id "
                            f"{sorted(missing)[0]!r}, which corpus.jsonl does not hold")
    doc_ids = list(corpus)
    docs = [" ".join(t for t in (corpus[i]["title"], corpus[i]["text"]) if t) for i in doc_ids]
    query_ids = [q for q in queries if q in relevant]
    return doc_ids, docs, query_ids, [queries[q]["text"] for q in query_ids], relevant


def rank_scores(query_embeddings, doc_embeddings, query_ids, doc_ids, relevant) -> dict:
    """{"mrr_at_10", "recall_at_10", "queries"}: each query's documents ranked by cosine
    (ties keep the corpus order)."""
    def unit(e):
        e = np.asarray(e, np.float64)
        return e / np.maximum(np.linalg.norm(e, axis=-1, keepdims=True), 1e-12)
    sims = unit(query_embeddings) @ unit(doc_embeddings).T
    top = np.argsort(-sims, axis=1, kind="stable")[:, :TOP]
    reciprocal, recall = [], []
    for row, query in enumerate(query_ids):
        found = [doc_ids[j] in relevant[query] for j in top[row]]
        first = found.index(True) if any(found) else None
        reciprocal.append(0.0 if first is None else 1.0 / (first + 1))
        recall.append(sum(found) / len(relevant[query]))
    return {"mrr_at_10": float(np.mean(reciprocal)), "recall_at_10": float(np.mean(recall)),
            "queries": len(query_ids)}


def evaluate(model, folder: str, split: str = "test", pooling="mean") -> dict:
    """The scores of `model` (pretrainx.load's) on the BEIR folder's `split`."""
    doc_ids, docs, query_ids, queries, relevant = read_folder(folder, split)
    result = rank_scores(embeddings(model, queries, pooling), embeddings(model, docs, pooling),
                         query_ids, doc_ids, relevant)
    return dict(result, documents=len(doc_ids), pooling=pooling or "family", split=split)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pretrainx.retrieval", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--data", required=True, help="the BEIR-layout folder")
    parser.add_argument("--split", default="test", help="qrels/SPLIT.tsv")
    parser.add_argument("--pooling", default="mean", help="mean | cls | family")
    args = parser.parse_args(argv)

    def run():
        pooling = similarity.pooling_flag(args.pooling)
        result = evaluate(inference.load(args.workdir), args.data, args.split, pooling)
        return dict(result, workdir=args.workdir, data=args.data)
    return json_command(run)


if __name__ == "__main__":
    sys.exit(main())
