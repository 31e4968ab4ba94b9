"""What the fine-tuning loop needs from a task, whatever its files look like.

A task builder reads its files, tokenizes them into fixed-length arrays, and says
how to score and write the model's outputs; the loop only trains, predicts and
keeps the best epoch.
"""

import dataclasses
from typing import Callable

from pretrainx.errors import UserError


def split_holdout(rows: list, held_out: int, path: str) -> tuple:
    """(train, holdout): the last `held_out` of the training rows read are kept out of
    training (data.holdout_examples), so that choosing an epoch or a learning rate need
    not look at the dev set that is reported."""
    if held_out <= 0:
        return rows, []
    if held_out >= len(rows):
        raise UserError(f"data.holdout_examples={held_out} leaves no training rows of the "
                        f"{len(rows)} read from {path}")
    return rows[:-held_out], rows[-held_out:]


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
    holdout: EvalSet | None = None  # training rows kept out: they choose the best epoch
    holdout_metric: str = ""  # what the holdout is scored by, if not metrics[0]

    @property
    def num_labels(self) -> int:
        return len(self.labels) or 1

    @property
    def regression(self) -> bool:
        return self.head == "classify" and not self.labels
