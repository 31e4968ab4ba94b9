"""python -m pretrainx.similarity --workdir=DIR --glue_dir=DIR [--pooling=mean] [--limit=N]

STS-B, zero-shot: a stored encoder's sentence embeddings (pretrainx.load(DIR).embed; a
pretraining workdir, a fine-tuning one or an HF directory) for both sentences of every
STS-B dev pair, and the Spearman correlation of their cosine similarities with the gold
scores (STS-B's measure as SentEval and MTEB report it; Pearson beside it). Mean pooling
by default: a pretrained MLM's [CLS] state was never trained to summarise a sentence;
`--pooling=family` takes the family's fine-tuning pooling. Prints one JSON line.
"""

import argparse
import os
import sys

import numpy as np

from pretrainx.trained import inference
from pretrainx.errors import UserError, json_command
from pretrainx.finetune import glue, scores

BATCH = 64  # sentences a forward pass


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of two [rows, dim] arrays."""
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return (a * b).sum(axis=1) / np.maximum(norms, 1e-12)


def embeddings(model, texts: list, pooling: str | None) -> np.ndarray:
    return np.concatenate([model.embed(texts[i:i + BATCH], pooling)
                           for i in range(0, len(texts), BATCH)])


def sts(model, glue_dir: str, pooling: str | None = "mean", split: str = "dev",
        limit: int = 0) -> dict:
    """{"spearman", "pearson", "pairs", "pooling"} on STS-B's `split` file."""
    task = glue.get_task("stsb")
    path = os.path.join(os.path.expanduser(glue_dir), task.directory, f"{split}.tsv")
    rows = glue.read_split(task, path, labelled=True, limit=limit)
    first = embeddings(model, [t[0] for t in rows.texts], pooling)
    second = embeddings(model, [t[1] for t in rows.texts], pooling)
    similarity = cosine(first, second)
    return {"spearman": scores.spearman(rows.labels, similarity),
            "pearson": scores.pearson(rows.labels, similarity), "pairs": len(rows.texts),
            "pooling": pooling or "family", "file": path}


def pooling_flag(value: str):
    """--pooling's value as embed takes it: "mean", "cls", or None for the family's."""
    if value not in ("mean", "cls", "family"):
        raise UserError(f"--pooling={value}: expected mean, cls or family")
    return None if value == "family" else value


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pretrainx.similarity", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--glue_dir", required=True, help="the folder holding STS-B/")
    parser.add_argument("--pooling", default="mean", help="mean | cls | family")
    parser.add_argument("--split", default="dev")
    parser.add_argument("--limit", type=int, default=0, help="the first N pairs (0: all)")
    args = parser.parse_args(argv)

    def run():
        pooling = pooling_flag(args.pooling)
        result = sts(inference.load(args.workdir), args.glue_dir, pooling, args.split,
                     args.limit)
        return dict(result, workdir=args.workdir)
    return json_command(run)


if __name__ == "__main__":
    sys.exit(main())
