"""GLUE tasks in their original TSV files: columns, labels, metrics, submission names.

Files are read as GLUE distributes them (tab-separated, no quoting, a header on
every file but CoLA's train/dev), so a GLUE download unpacked into `glue_dir`
works as is. Anything that does not fit the task's format stops with one line
that names the file, the line and what was expected.
"""

import csv
import dataclasses
import os

import numpy as np

from pretrainx.errors import UserError
from pretrainx.finetune import scores
from pretrainx.finetune.task import EvalSet, TaskData, split_holdout


@dataclasses.dataclass(frozen=True)
class Task:
    name: str  # config value: sst2, cola, ...
    directory: str  # under glue_dir: SST-2, CoLA, ...
    text_columns: tuple  # one (single sentence) or two (pair) column names or indices
    label_column: object  # name, or index for header-less files
    labels: tuple  # label strings in id order; () for regression
    metrics: tuple  # official GLUE metrics, the first decides the best epoch
    dev_files: tuple = ("dev.tsv",)
    submission: tuple = ()  # GLUE's prediction file per test file
    test_files: tuple = ("test.tsv",)
    header: bool = True
    columns: int = 0  # fields in a row of a header-less file (CoLA's 4)
    test_text_columns: tuple | None = None  # when the test file names them differently

    @property
    def is_regression(self) -> bool:
        return not self.labels

    @property
    def num_labels(self) -> int:
        return len(self.labels) or 1


TASKS = {t.name: t for t in (
    Task("cola", "CoLA", (3,), 1, ("0", "1"), ("matthews_corr",), header=False, columns=4,
         submission=("CoLA.tsv",), test_text_columns=("sentence",)),
    Task("sst2", "SST-2", ("sentence",), "label", ("0", "1"), ("accuracy",),
         submission=("SST-2.tsv",)),
    Task("mrpc", "MRPC", ("#1 String", "#2 String"), "Quality", ("0", "1"), ("f1", "accuracy"),
         submission=("MRPC.tsv",)),
    Task("qqp", "QQP", ("question1", "question2"), "is_duplicate", ("0", "1"),
         ("f1", "accuracy"), submission=("QQP.tsv",)),
    Task("stsb", "STS-B", ("sentence1", "sentence2"), "score", (), ("pearson", "spearman"),
         submission=("STS-B.tsv",)),
    Task("mnli", "MNLI", ("sentence1", "sentence2"), "gold_label",
         ("contradiction", "entailment", "neutral"), ("accuracy",),
         dev_files=("dev_matched.tsv", "dev_mismatched.tsv"),
         test_files=("test_matched.tsv", "test_mismatched.tsv"),
         submission=("MNLI-m.tsv", "MNLI-mm.tsv")),
    Task("qnli", "QNLI", ("question", "sentence"), "label", ("entailment", "not_entailment"),
         ("accuracy",), submission=("QNLI.tsv",)),
    Task("rte", "RTE", ("sentence1", "sentence2"), "label", ("entailment", "not_entailment"),
         ("accuracy",), submission=("RTE.tsv",)),
    Task("wnli", "WNLI", ("sentence1", "sentence2"), "label", ("0", "1"), ("accuracy",),
         submission=("WNLI.tsv",)),
)}


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise UserError(f"config key 'task' is {name!r}; GLUE's tasks are {', '.join(TASKS)}")
    return TASKS[name]


@dataclasses.dataclass
class Split:
    """Raw examples of one file: texts (tuples of 1 or 2 strings), labels, GLUE indices."""
    path: str
    texts: list
    labels: list  # int class ids, floats for regression, None for test files
    indices: list


def tsv_rows(path: str):
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            yield from enumerate(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE), start=1)
    except FileNotFoundError:
        raise UserError(f"GLUE file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read GLUE file {path}: {e}") from None


def column_index(path, header, column, what):
    if isinstance(column, int):
        return column
    if column not in header:
        raise UserError(f"{path}: no {what} column {column!r} in the header "
                        f"({', '.join(header)})")
    return header.index(column)


def read_split(task: Task, path: str, labelled: bool, limit: int = 0) -> Split:
    """Examples of one GLUE file; `limit` > 0 keeps the first `limit` rows."""
    rows = tsv_rows(path)
    header = None
    has_header = task.header or not labelled  # GLUE's test files all have one
    text_columns = task.text_columns if labelled else (task.test_text_columns or task.text_columns)
    if has_header:
        first = next(rows, None)
        if first is None:
            raise UserError(f"GLUE file {path} is empty")
        header = first[1]
        text_idx = [column_index(path, header, c, "text") for c in text_columns]
        label_idx = column_index(path, header, task.label_column, "label") if labelled else None
        index_idx = header.index("index") if "index" in header else None
    else:
        text_idx, label_idx, index_idx = list(text_columns), task.label_column, None
    # A row of another width than the file's: a tab inside a sentence, or fields lost;
    # read by position it would pair the wrong texts and labels without a word.
    width = len(header) if header is not None else task.columns
    label_ids = {label: i for i, label in enumerate(task.labels)}
    split = Split(path, [], [] if labelled else None, [])
    needed = max(text_idx + ([label_idx] if label_idx is not None else [])) + 1
    for line_no, row in rows:
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if len(row) < needed or (width and len(row) != width):
            raise UserError(f"{path} line {line_no}: {len(row)} tab-separated fields, expected "
                            f"{width or f'at least {needed}'}"
                            + (" as in its header" if header is not None else ""))
        split.texts.append(tuple(row[i] for i in text_idx))
        split.indices.append(row[index_idx] if index_idx is not None else str(len(split.indices)))
        if labelled:
            value = row[label_idx].strip()
            if task.is_regression:
                try:
                    split.labels.append(float(value))
                except ValueError:
                    raise UserError(f"{path} line {line_no}: score {value!r} is not a number"
                                    ) from None
            elif value not in label_ids:
                raise UserError(f"{path} line {line_no}: unknown label {value!r}; expected one "
                                f"of {', '.join(task.labels)}")
            else:
                split.labels.append(label_ids[value])
        if limit and len(split.texts) >= limit:
            break
    if not split.texts:
        raise UserError(f"GLUE file {path} has no examples")
    return split


def task_files(task: Task, glue_dir: str) -> dict:
    """{"train": path, "dev": [paths], "test": [(path, submission name) that exist]}."""
    root = os.path.join(os.path.expanduser(glue_dir), task.directory)
    if not os.path.isdir(root):
        raise UserError(f"no {task.directory} folder in data.glue_dir={glue_dir}")
    return {"train": os.path.join(root, "train.tsv"),
            "dev": [os.path.join(root, f) for f in task.dev_files],
            "test": [(os.path.join(root, f), name) for f, name in zip(task.test_files,
                                                                     task.submission)
                     if os.path.isfile(os.path.join(root, f))]}


def format_prediction(task: Task, value) -> str:
    """A prediction as GLUE's server reads it: the label string, or a score in [0, 5]."""
    if task.is_regression:
        return f"{min(max(float(value), 0.0), 5.0):.3f}"
    return task.labels[int(value)]


def encode(split: Split, tokenizer, seq_len: int, regression: bool) -> dict:
    """[CLS] a [SEP] (b [SEP]) as BERT's run_classifier builds it: a pair is cut
    longest-first to fit, token types 0 then 1."""
    n = len(split.texts)
    ids = np.full((n, seq_len), tokenizer.pad_id, np.int32)
    types = np.zeros((n, seq_len), np.int32)
    mask = np.zeros((n, seq_len), np.int32)
    for row, texts in enumerate(split.texts):
        parts = [tokenizer.encode(t) for t in texts]
        budget = seq_len - 1 - len(parts)
        while sum(len(p) for p in parts) > budget:
            max(parts, key=len).pop()
        tokens, segment = [tokenizer.cls_id], [0]
        for index, part in enumerate(parts):
            tokens += part + [tokenizer.sep_id]
            segment += [index] * (len(part) + 1)
        ids[row, :len(tokens)] = tokens
        types[row, :len(tokens)] = segment
        mask[row, :len(tokens)] = 1
    label_dtype = np.float32 if regression else np.int32
    labels = np.asarray(split.labels if split.labels is not None else np.zeros(n), label_dtype)
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask,
            "label": labels, "weight": np.ones(n, np.float32)}


def _predicted(task, outputs):
    return outputs[:, 0] if task.is_regression else outputs.argmax(-1)


def build(task: Task, cfg, tokenizer):
    files = task_files(task, cfg.data.glue_dir)
    encoded = lambda split: encode(split, tokenizer, cfg.seq_len, task.is_regression)
    scored = lambda name, split: EvalSet(name, encoded(split), lambda out, y=split.labels:
                                         scores.score(task.metrics, y, _predicted(task, out)))
    read = read_split(task, files["train"], True, cfg.data.max_train_examples)
    kept, held = zip(*(split_holdout(rows, cfg.data.holdout_examples, read.path)
                       for rows in (read.texts, read.labels, read.indices)))
    train = encoded(Split(read.path, *kept))
    holdout = scored("holdout", Split(read.path, *held)) if held[0] else None
    dev = []
    for path in files["dev"]:
        split = read_split(task, path, True, cfg.data.max_eval_examples)
        name = "" if len(files["dev"]) == 1 else os.path.basename(path)[4:-4]  # matched, ...
        dev.append(scored(name, split))
    test = []
    for path, submission in files["test"]:
        split = read_split(task, path, False)
        test.append(EvalSet(submission, encoded(split), None, lambda workdir, out, s=split,
                            name=submission: write_submission(workdir, name, s.indices,
                                                              _predicted(task, out), task)))
    return TaskData("classify", task.labels, task.metrics, train, dev, test, holdout=holdout)


def write_submission(workdir, name, indices, preds, task) -> str:
    folder = os.path.join(workdir, "predictions")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write("index\tprediction\n")
        for index, value in zip(indices, preds):
            f.write(f"{index}\t{format_prediction(task, value)}\n")
    return path
