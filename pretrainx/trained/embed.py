"""python -m pretrainx.embed --workdir=DIR --text="..." [--text="..."] [--output=FILE.npz]

Runs a stored model (a pretraining workdir or an HF directory) on texts with
pretrainx.load and writes its outputs for every position: input_ids, attention_mask,
hidden_states [rows, length, hidden] and logits [rows, length, vocab], as one .npz
(numpy.load reads it). Prints a JSON line with the shapes and, per text, the tokens
and the mean of its real tokens' hidden states' first values, to look at.

A sentence embedder (the workdir of a contrastive fine-tuning) has no
vocabulary head: its .npz holds `embeddings` [rows, width], the unit vectors
SentenceTransformer gives for its export (--dim: the first values, a Matryoshka width).
"""

import json
import os

import numpy as np
from absl import flags

from pretrainx.trained import inference
from pretrainx import cli
from pretrainx.errors import UserError

_TEXT = flags.DEFINE_multi_string("text", None, "A text to run (repeat for more rows).")
_OUTPUT = flags.DEFINE_string("output", None, "The .npz file to write (optional).")
_DIM = flags.DEFINE_integer("dim", 0, "A sentence embedder: keep the first values (0: all).")


def run(argv) -> int:
    if len(argv) > 1:
        raise UserError(f"unexpected arguments: {' '.join(argv[1:])}")
    if not cli.workdir() or not _TEXT.value:
        raise UserError("--workdir and at least one --text are required")
    if _OUTPUT.value and not _OUTPUT.value.endswith(".npz"):
        raise UserError(f"--output={_OUTPUT.value}: the file is written as .npz; name it so")
    model = inference.load(cli.workdir())
    if inference.embedder_of(model.pretrained.head):
        return _sentence_vectors(model)
    if _DIM.value:
        raise UserError(f"--dim is for a sentence embedder; {cli.workdir()} holds a "
                        f"{model.pretrained.head} head")
    out = model(texts=_TEXT.value)
    if _OUTPUT.value:
        os.makedirs(os.path.dirname(os.path.abspath(_OUTPUT.value)), exist_ok=True)
        np.savez(_OUTPUT.value, **out)
    rows = []
    for i, text in enumerate(_TEXT.value):
        real = out["attention_mask"][i] > 0
        mean = out["hidden_states"][i][real].mean(axis=0)
        rows.append({"text": text, "tokens": [model.tokenizer.id_to_piece(int(t))
                                              for t in out["input_ids"][i][real]],
                     "mean_hidden_first": [round(float(v), 4) for v in mean[:4]]})
    print(json.dumps({"hidden_states": list(out["hidden_states"].shape),
                      "logits": list(out["logits"].shape), "output": _OUTPUT.value,
                      "rows": rows}, ensure_ascii=False))
    return 0


def _sentence_vectors(model) -> int:
    vectors = model.embed(_TEXT.value, dim=_DIM.value)
    if _OUTPUT.value:
        os.makedirs(os.path.dirname(os.path.abspath(_OUTPUT.value)), exist_ok=True)
        np.savez(_OUTPUT.value, embeddings=vectors)
    print(json.dumps({"embeddings": list(vectors.shape), "output": _OUTPUT.value,
                      "rows": [{"text": t, "first": [round(float(v), 4) for v in vec[:4]]}
                               for t, vec in zip(_TEXT.value, vectors)]}, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    cli.main(run)
