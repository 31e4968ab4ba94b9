"""What the fine-tuning loop needs from a task, whatever its files look like.

A task builder reads its files, tokenizes them into fixed-length arrays, and says
how to score and write the model's outputs; the loop only trains, predicts and
keeps the best epoch.
"""

import dataclasses
from typing import Callable

from pretrainx.errors import UserError


@dataclasses.dataclass
class EvalSet:
    name: str  # "" for a task's single dev set; "matched", "test", ...
    arrays: dict  # model inputs (rows of equal length), as the train arrays
    score: Callable | None  # outputs [rows, ...] -> {metric: value}; None: unlabelled
    write: Callable | None = None  # (workdir, outputs) -> path of the predictions file


@dataclasses.dataclass
class TaskData:
    head: str  # classify | tokens | span (BERT heads) | seq2seq (T5, generated ids)
    labels: tuple  # label strings in id order; () for regression
    metrics: tuple  # the first decides the best epoch
    train: dict  # arrays with a "weight" row (or token) mask
    dev: list  # [EvalSet] scored after every epoch
    test: list  # [EvalSet] predicted with the best epoch's parameters
    predict_inputs: tuple = ("input_ids", "token_type_ids", "attention_mask")

    @property
    def num_labels(self) -> int:
        return len(self.labels) or 1

    @property
    def regression(self) -> bool:
        return self.head == "classify" and not self.labels


def task_names() -> list:
    from pretrainx.finetune import glue
    return list(glue.TASKS) + ["conll2003", "squad"]


def build(cfg, tokenizer, family: str = "bert") -> TaskData:
    """The TaskData of `cfg.task` from its files under data.glue_dir / data.squad_dir,
    in T5's text-to-text form for a T5 model."""
    name = cfg.task
    if family == "t5":
        from pretrainx.finetune import text_to_text
        return text_to_text.build(cfg, tokenizer)
    if name == "conll2003":
        from pretrainx.finetune import conll
        return conll.build(cfg, tokenizer)
    if name == "squad":
        from pretrainx.finetune import squad
        return squad.build(cfg, tokenizer)
    from pretrainx.finetune import glue
    return glue.build(glue.get_task(name), cfg, tokenizer)


def check_name(name: str) -> None:
    if name not in task_names():
        raise UserError(f"config key 'task' is {name!r}; known: {', '.join(task_names())}")
