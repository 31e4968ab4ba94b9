"""GLUE tasks in their original TSV files: columns, labels, metrics, submission names.

Files are read as GLUE distributes them (tab-separated, no quoting, a header on
every file but CoLA's train/dev), so a GLUE download unpacked into `glue_dir`
works as is. Anything that does not fit the task's format stops with one line
that names the file, the line and what was expected.
"""

import csv
import dataclasses
import os

from pretrainx.errors import UserError


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
    test_text_columns: tuple | None = None  # when the test file names them differently

    @property
    def is_regression(self) -> bool:
        return not self.labels

    @property
    def num_labels(self) -> int:
        return len(self.labels) or 1


TASKS = {t.name: t for t in (
    Task("cola", "CoLA", (3,), 1, ("0", "1"), ("matthews_corr",), header=False,
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
        raise UserError(f"config key 'task' is {name!r}; known: {', '.join(TASKS)}")
    return TASKS[name]


@dataclasses.dataclass
class Split:
    """Raw examples of one file: texts (tuples of 1 or 2 strings), labels, GLUE indices."""
    path: str
    texts: list
    labels: list  # int class ids, floats for regression, None for test files
    indices: list


def _rows(path: str):
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            yield from enumerate(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE), start=1)
    except FileNotFoundError:
        raise UserError(f"GLUE file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read GLUE file {path}: {e}") from None


def _column_index(path, header, column, what):
    if isinstance(column, int):
        return column
    if column not in header:
        raise UserError(f"{path}: no {what} column {column!r} in the header "
                        f"({', '.join(header)})")
    return header.index(column)


def read_split(task: Task, path: str, labelled: bool, limit: int = 0) -> Split:
    """Examples of one GLUE file; `limit` > 0 keeps the first `limit` rows."""
    rows = _rows(path)
    header = None
    has_header = task.header or not labelled  # GLUE's test files all have one
    text_columns = task.text_columns if labelled else (task.test_text_columns or task.text_columns)
    if has_header:
        first = next(rows, None)
        if first is None:
            raise UserError(f"GLUE file {path} is empty")
        header = first[1]
        text_idx = [_column_index(path, header, c, "text") for c in text_columns]
        label_idx = _column_index(path, header, task.label_column, "label") if labelled else None
        index_idx = header.index("index") if "index" in header else None
    else:
        text_idx, label_idx, index_idx = list(text_columns), task.label_column, None
    label_ids = {label: i for i, label in enumerate(task.labels)}
    split = Split(path, [], [] if labelled else None, [])
    needed = max(text_idx + ([label_idx] if label_idx is not None else [])) + 1
    for line_no, row in rows:
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if len(row) < needed:
            raise UserError(f"{path} line {line_no}: {len(row)} columns, expected at least "
                            f"{needed}")
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
    """{"train": path, "dev": [paths], "test": [paths that exist]}."""
    root = os.path.join(os.path.expanduser(glue_dir), task.directory)
    if not os.path.isdir(root):
        raise UserError(f"no {task.directory} folder in data.glue_dir={glue_dir}")
    return {"train": os.path.join(root, "train.tsv"),
            "dev": [os.path.join(root, f) for f in task.dev_files],
            "test": [os.path.join(root, f) for f in task.test_files
                     if os.path.isfile(os.path.join(root, f))]}


def format_prediction(task: Task, value) -> str:
    """A prediction as GLUE's server reads it: the label string, or a score in [0, 5]."""
    if task.is_regression:
        return f"{min(max(float(value), 0.0), 5.0):.3f}"
    return task.labels[int(value)]
