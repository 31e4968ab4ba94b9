"""The README.md model card an HF export carries: what the model is, how it was
trained (objective or task, steps, tokens, data, the recipe's main values), what it
scored, its license, and how to load it. Written from what the export reads, so a
card never claims what the run did not record."""

import json
import os

import jax
import numpy as np

# config.json's head -> the Hub's pipeline tag
PIPELINES = {"pretrain": "fill-mask", "mlm": "fill-mask", "classify": "text-classification",
             "tokens": "token-classification", "span": "question-answering",
             "seq2seq": "text2text-generation", "causal_lm": "text-generation",
             "encoder": "feature-extraction"}


def run_record(workdir: str, step: int | None = None, split: str = "eval") -> dict | None:
    """The last `split` record of WORKDIR/metrics.jsonl at or before `step` (None: any),
    or None where there is none (a run that never evaluated, a missing file)."""
    path = os.path.join(workdir, "metrics.jsonl")
    last = None
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    record = json.loads(line)
                except ValueError:  # a torn last line
                    continue
                if record.get("split", "train") == split and (
                        step is None or record.get("step", 0) <= step):
                    last = record
    except OSError:
        return None
    return last


def trained_tokens(phases, step: int) -> int:
    """Sequence positions a run went through by `step`: rows x length in every phase."""
    return sum(max(0, min(step, p.end) - p.start) * p.global_batch_size * p.seq_len
               for p in phases)


def _table(record: dict) -> list:
    skip = {"step", "split", "epoch", "source", "tokens_per_sec", "mfu", "input_wait", "seq_len",
            "global_batch_size", "learning_rate", "grad_norm", "skipped_steps"}
    rows = [(k, v) for k, v in sorted(record.items())
            if k not in skip and isinstance(v, (int, float))]
    return ["| metric | value |", "|---|---|"] + [f"| {k} | {v:.4f} |" for k, v in rows]


def card(pretrained, config: dict, license_id: str) -> str:
    """README.md for an export of `pretrained` whose config.json is `config`."""
    m, run = pretrained.model, pretrained.run or {}
    architecture = (config.get("architectures") or ["AutoModel"])[0]
    count = int(sum(np.asarray(x).size for x in jax.tree_util.tree_leaves(pretrained.params)))
    tags = ["pretrainx", pretrained.family] + [t for t in (run.get("objective"),
                                                           pretrained.task) if t]
    front = ["---", "library_name: transformers", f"license: {license_id}", "tags:"]
    front += [f"- {t}" for t in dict.fromkeys(tags)]
    if pretrained.head in PIPELINES:
        front.append(f"pipeline_tag: {PIPELINES[pretrained.head]}")
    front.append("---")
    shape = ", ".join(f"{k} {m[k]}" for k in ("num_layers", "hidden_size", "num_heads",
                                               "vocab_size") if k in m)
    lines = front + ["", f"# {pretrained.family} ({architecture})", "",
                     f"A {pretrained.family} model ({shape}; {count:,} parameters as "
                     "pretrainx counts them), exported by `python -m pretrainx.export` from "
                     f"`{pretrained.source}`.", "", "## Training", ""]
    if not run:
        lines.append("Not trained by pretrainx: converted from the directory above.")
    for key, what in (("objective", "objective"), ("task", "fine-tuning task"),
                      ("step", "steps"), ("tokens", "sequence positions trained"),
                      ("train_files", "training data"), ("init_from", "started from"),
                      ("recipe", "recipe values")):
        if run.get(key) not in (None, "", {}):
            value = run[key]
            if key == "step" and run.get("total_steps"):
                value = f"{value:,} of {run['total_steps']:,}"
            elif isinstance(value, int):
                value = f"{value:,}"
            elif isinstance(value, dict):
                value = ", ".join(f"{k}={v}" for k, v in value.items())
            lines.append(f"- {what}: {value}")
    scores = run.get("eval")
    lines += ["", "## Evaluation", ""]
    if scores:
        at = f" (step {scores['step']:,})" if "step" in scores else ""
        lines += [f"The last evaluation the run recorded{at}:", ""] + _table(scores)
    else:
        lines.append("No evaluation was recorded.")
    lines += ["", "## How to load", "", "```python",
              f"from transformers import AutoTokenizer, {architecture}",
              "", 'tokenizer = AutoTokenizer.from_pretrained("PATH_OR_REPO")',
              f'model = {architecture}.from_pretrained("PATH_OR_REPO")', "```", ""]
    if pretrained.head.startswith("embed_"):
        dims = run.get("matryoshka_dims") or []
        lines += ["A sentence embedder (unit vectors, compared by cosine):", "", "```python",
                  "from sentence_transformers import SentenceTransformer", "",
                  'model = SentenceTransformer("PATH_OR_REPO")', "```", ""]
        if dims:
            lines += [f"Matryoshka widths it was trained at: {', '.join(map(str, dims))}. "
                      f'`SentenceTransformer("PATH_OR_REPO", truncate_dim={dims[-1]})` keeps '
                      "the first values of each vector.", ""]
    return "\n".join(lines)

