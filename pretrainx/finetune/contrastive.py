"""Contrastive fine-tuning into a sentence embedder (task `contrastive`): rows of an
anchor, its positive and optionally a hard negative, each text pooled (mean or [CLS])
by any encoder's `embed_mean` / `embed_cls` head, and InfoNCE over in-batch negatives
(Sentence-BERT's MultipleNegativesRankingLoss, E5, GTE): each anchor against every
positive and hard negative of the global batch, at a fixed temperature or, with
data.learn_temperature, a learned one (CLIP's: the log of 1 / temperature is a parameter,
starting at data.temperature, the scale capped at 100). Under jit the
candidate matrix spans the whole batch, however it is sharded, so 1 device and 8 give
the same loss.

Pairs come from `data.pairs_file` (TSV with a header, JSONL, or Parquet; the columns
`data.pair_fields` names) or, without one, from STS-B's training split (pairs scored
>= 4 of 5, under data.glue_dir). Dev: STS-B's dev Spearman of cosine similarities when
data.glue_dir is set, else retrieval over the last `data.holdout_examples` pairs
(each anchor ranks every held-out positive: MRR@10, recall@1 and @10).
"""

import os

import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn
import pyarrow.parquet as pq

from pretrainx.data import jsonl
from pretrainx.errors import UserError
from pretrainx.finetune import glue, scores
from pretrainx.finetune.task import EvalSet, TaskData, split_holdout

INPUTS = ("input_ids", "token_type_ids", "attention_mask")
SCALE = "contrastive"  # the learned temperature's parameter, beside the encoder's
MAX_SCALE = 100.0  # CLIP's cap on 1 / temperature
STS_POSITIVE = 4.0  # STS-B pairs at or above this score are positives (of 5)


class Paired:
    """A fine-tuning model over rows of k texts: inputs [B, k, L] run as [B*k, L] through
    `model` (its parameters and their paths unchanged), embeddings back as [B, k, H].
    With `learned_temperature` (its start) the parameters also hold SCALE's log of
    1 / temperature, which apply returns as "log_scale" for the loss."""

    def __init__(self, model, learned_temperature: float = 0.0):
        self.model, self.start = model, learned_temperature

    @staticmethod
    def _flat(batch):
        return {k: v.reshape((-1,) + v.shape[2:]) if k in INPUTS else v
                for k, v in batch.items() if k in INPUTS}

    def init(self, rngs, batch, **kwargs):
        variables = self.model.init(rngs, self._flat(batch), **kwargs)
        if not self.start:
            return variables
        scale = {"log_scale": nn.LogicallyPartitioned(  # a scalar: no axes, replicated
            jnp.log(jnp.asarray(1.0 / self.start, jnp.float32)), ())}
        return {**variables, "params": {**variables["params"], SCALE: scale}}

    def apply(self, variables, batch, *args, **kwargs):
        rows, k = batch["input_ids"].shape[:2]
        params = variables["params"]
        extra = {"log_scale": params[SCALE]["log_scale"]} if SCALE in params else {}
        variables = {**variables, "params": without_scale(params)}
        out = self.model.apply(variables, self._flat(batch), *args, **kwargs)
        return {"logits": out["logits"].reshape(rows, k, -1), **extra}


def without_scale(params) -> dict:
    """The encoder's parameters alone: what a contrastive fine-tuning keeps and exports."""
    return {k: v for k, v in params.items() if k != SCALE}


def matryoshka_dims(text: str, width: int | None) -> tuple:
    """data.matryoshka_dims as widths, widest first ("" -> ()); a width the model does
    not have (`width`: its hidden size, None: not known yet) is refused in one line."""
    try:
        dims = tuple(int(d) for d in text.split(",") if d.strip())
    except ValueError:
        raise UserError(f"data.matryoshka_dims={text!r}: expected widths like "
                        "768,512,256,128") from None
    if any(d <= 0 for d in dims) or len(set(dims)) != len(dims):
        raise UserError(f"data.matryoshka_dims={text!r}: widths must be positive and distinct")
    if width is not None and dims and max(dims) > width:
        raise UserError(f"data.matryoshka_dims={text!r} has {max(dims)}, wider than the "
                        f"model's embeddings ({width})")
    return tuple(sorted(dims, reverse=True))


def _normed(e):
    return e / jnp.maximum(jnp.linalg.norm(e, axis=-1, keepdims=True), 1e-12)


def distill_gap(student, teacher, how: str):
    """[B]: the mean over a row's texts of 1 - cos(student, teacher) or of their mean
    squared difference (sentence-transformers' MSELoss)."""
    if how == "mse":
        return jnp.mean(jnp.square(student - teacher), axis=(-2, -1))
    return jnp.mean(1.0 - jnp.sum(_normed(student) * _normed(teacher), axis=-1), axis=-1)


def teacher_embeddings(path: str, rows: list, width: int) -> np.ndarray:
    """[N, k, H] embeddings of every text of `rows` by the model at `path`
    (pretrainx.load(path).embed), which must be `width` wide."""
    from pretrainx.trained import inference  # the loading of any stored model
    teacher = inference.load(path)
    columns = [teacher.embed([r[j] for r in rows]) for j in range(len(rows[0]))]
    out = np.stack(columns, axis=1).astype(np.float32)
    if out.shape[-1] != width:
        raise UserError(f"data.teacher={path} gives {out.shape[-1]}-wide embeddings; the "
                        f"student's are {width} wide (distillation matches them as they are)")
    return out


class InfoNceLoss:
    """The train step's objective for embedding rows [B, k, H]: cross-entropy of each
    anchor's cosine similarities / temperature over the batch's positives and
    negatives, its own positive the label. The temperature is the model's learned one
    where its outputs carry "log_scale", else the fixed `temperature`. With Matryoshka
    `dims` the loss is the sum of this at each leading width (cut, then normed), and
    the accuracy is the widest's."""

    def __init__(self, temperature: float, dims: tuple = (), distill: str = "cosine",
                 distill_weight: float = 1.0):
        self.temperature, self.dims = temperature, tuple(dims)
        self.distill, self.distill_weight = distill, distill_weight

    def loss_sums(self, outputs, batch) -> dict:
        e = outputs["logits"].astype(jnp.float32)
        scale = (jnp.minimum(jnp.exp(outputs["log_scale"]), MAX_SCALE)
                 if "log_scale" in outputs else jnp.float32(1.0 / self.temperature))
        labels = jnp.arange(e.shape[0])
        loss, correct = 0.0, None
        for d in self.dims or (e.shape[-1],):
            cut = _normed(e[..., :d])
            anchors, others = cut[:, 0], cut[:, 1:]
            candidates = jnp.swapaxes(others, 0, 1).reshape(-1, d)  # positives first
            logits = anchors @ candidates.T * scale
            loss = loss + optax.softmax_cross_entropy_with_integer_labels(logits, labels)
            if correct is None:
                correct = (jnp.argmax(logits, -1) == labels).astype(jnp.float32)
        w = batch["weight"]
        extra = {}
        if "teacher" in batch:  # embedding distillation: every text of the row
            gap = distill_gap(e, batch["teacher"].astype(jnp.float32), self.distill)
            loss = loss + self.distill_weight * gap
            extra = {"distill_sum": jnp.sum(w * gap)}
        return {**extra, "loss_sum": jnp.sum(w * loss), "correct_sum": jnp.sum(w * correct),
                "count": jnp.sum(w), "temperature_sum": jnp.sum(w) / scale}

    def normalizers(self, batch) -> dict:
        return {"n": jnp.maximum(jnp.sum(batch["weight"]), 1.0)}

    def loss(self, sums, norms):
        return sums["loss_sum"] / norms["n"]

    def metrics(self, sums, norms) -> dict:
        out = {"accuracy": sums["correct_sum"] / norms["n"],  # the positive ranked first
               "temperature": sums["temperature_sum"] / norms["n"]}
        if "distill_sum" in sums:
            out["distill"] = sums["distill_sum"] / norms["n"]
        return out


def _cosines(outputs) -> np.ndarray:
    e = np.asarray(outputs, np.float64)
    e /= np.maximum(np.linalg.norm(e, axis=-1, keepdims=True), 1e-12)
    return e


def retrieval_scores(outputs) -> dict:
    """{"mrr_at_10", "recall_at_1", "recall_at_10"}: each anchor (outputs[:, 0]) ranks
    every row's positive (outputs[:, 1]) by cosine; its own is the relevant one."""
    e = _cosines(outputs)
    sims = e[:, 0] @ e[:, 1].T
    rank = (sims > np.diag(sims)[:, None]).sum(axis=1)  # 0: first
    return {"mrr_at_10": float(np.mean(np.where(rank < 10, 1.0 / (rank + 1), 0.0))),
            "recall_at_1": float(np.mean(rank < 1)), "recall_at_10": float(np.mean(rank < 10))}


def sts_scores(outputs, gold, dims: tuple = ()) -> dict:
    """Spearman and Pearson of the pairs' cosines against `gold`; with Matryoshka
    `dims`, Spearman at each leading width too (spearman_at_256, ...)."""
    def spearman(e):
        return scores.spearman(gold, np.sum(e[:, 0] * e[:, 1], axis=-1))
    e = _cosines(outputs)
    similarity = np.sum(e[:, 0] * e[:, 1], axis=-1)
    out = {"spearman": scores.spearman(gold, similarity),
           "pearson": scores.pearson(gold, similarity)}
    out.update({f"spearman_at_{d}": spearman(_cosines(np.asarray(outputs)[..., :d]))
                for d in dims})
    return out


def read_pairs(path: str, fields: list, limit: int = 0) -> list:
    """[(anchor, positive[, negative])] of a TSV (with a header), JSONL or Parquet file."""
    if not os.path.isfile(path):
        raise UserError(f"data.pairs_file {path} not found")
    rows = []
    if path.endswith(".parquet"):
        try:
            table = pq.read_table(path, columns=fields)
        except Exception as e:  # noqa: BLE001 - a missing column, a damaged file
            raise UserError(f"{path}: cannot read columns {fields}: {str(e).splitlines()[0]}"
                            ) from None
        rows = list(zip(*(table.column(f).to_pylist() for f in fields)))
    elif path.endswith((".jsonl", ".json")):
        rows = [tuple(r[k] for k in fields) for r in jsonl.records(path, tuple(fields))]
    else:
        lines = glue.tsv_rows(path)
        header = next(lines, (0, None))[1]
        if not header:
            raise UserError(f"data.pairs_file {path} is empty")
        index = [glue.column_index(path, header, f, "text") for f in fields]
        for line_no, row in lines:
            if len(row) != len(header):
                raise UserError(f"{path} line {line_no}: {len(row)} tab-separated fields, "
                                f"expected {len(header)} as in its header")
            rows.append(tuple(row[i] for i in index))
    rows = [r for r in rows if all(isinstance(t, str) and t.strip() for t in r)]
    if not rows:
        raise UserError(f"data.pairs_file {path} has no rows with all of {', '.join(fields)}")
    return rows[:limit] if limit else rows


def encode_rows(rows: list, tokenizer, seq_len: int, frame=None) -> dict:
    """Arrays [N, k, L] of rows of k texts, each on its own: [CLS] text [SEP], or as
    `frame` (a text's pieces -> its ids, registry.text_ids: a decoder's) frames it,
    the pieces cut to fit."""
    if frame is None:
        columns = []
        for j in range(len(rows[0])):
            split = glue.Split("", [(r[j],) for r in rows], None, [])
            columns.append(glue.encode(split, tokenizer, seq_len, regression=False))
        out = {k: np.stack([c[k] for c in columns], axis=1) for k in INPUTS}
    else:
        room = seq_len - len(frame([]))
        shape = (len(rows), len(rows[0]), seq_len)
        out = {"input_ids": np.full(shape, tokenizer.pad_id, np.int32),
               "token_type_ids": np.zeros(shape, np.int32),
               "attention_mask": np.zeros(shape, np.int32)}
        for i, row in enumerate(rows):
            for j, text in enumerate(row):
                ids = frame(list(tokenizer.encode(text))[:room])
                out["input_ids"][i, j, :len(ids)] = ids
                out["attention_mask"][i, j, :len(ids)] = 1
    out["weight"] = np.ones(len(rows), np.float32)
    return out


def _sts_split(glue_dir: str, split: str):
    """STS-B's train or dev split under `glue_dir` (texts and gold scores)."""
    task = glue.get_task("stsb")
    files = glue.task_files(task, glue_dir)
    return glue.read_split(task, files["train"] if split == "train" else files["dev"][0], True)


def _simcse_rows(rows: list) -> list:
    """Unsupervised SimCSE's rows: each distinct text (first column) as its own positive,
    in first-seen order; dropout makes the two views."""
    seen = dict.fromkeys(r[0] for r in rows)
    return [(t, t) for t in seen]


def build(cfg, tokenizer, frame=None, width: int = 0) -> TaskData:
    """`frame`: a text's pieces -> ids for a model that does not read [CLS] text [SEP]
    (a decoder: registry.text_ids); `width`: the student's embedding width (a teacher's
    must match it)."""
    data = cfg.data
    fields = [f.strip() for f in data.pair_fields.split(",") if f.strip()]
    if len(fields) not in ((1, 2, 3) if data.simcse else (2, 3)):
        raise UserError(f"data.pair_fields={data.pair_fields!r}: name an anchor and a positive "
                        "column, and optionally a hard negative")
    if data.pairs_file:
        rows, source = read_pairs(data.pairs_file, fields, data.max_train_examples), data.pairs_file
    elif data.simcse:  # every sentence of STS-B's train split, its scores unread
        train_split = _sts_split(data.glue_dir, "train")
        rows = [(t,) for pair in train_split.texts for t in pair]
        source = "STS-B train sentences"
    else:  # STS-B's pairs scored >= 4 (the dev split is read below, not twice)
        train_split = _sts_split(data.glue_dir, "train")
        rows = [t for t, y in zip(train_split.texts, train_split.labels) if y >= STS_POSITIVE]
        rows, source = rows[:data.max_train_examples or None], "STS-B train pairs scored >= 4"
    if data.simcse:
        rows = _simcse_rows(rows)[:data.max_train_examples or None]
    dims = matryoshka_dims(data.matryoshka_dims, None)
    sts_dev = _sts_split(data.glue_dir, "dev") if data.glue_dir else None
    train, held = split_holdout(rows, data.holdout_examples, source)
    head = f"embed_{data.pooling}"
    dev = []
    if sts_dev is not None:
        limit = data.max_eval_examples or len(sts_dev.texts)
        arrays = encode_rows(sts_dev.texts[:limit], tokenizer, cfg.seq_len, frame)
        gold = np.asarray(sts_dev.labels[:limit])
        dev.append(EvalSet("", arrays, lambda out, y=gold: sts_scores(out, y, dims)))
    holdout = None
    if held:
        holdout = EvalSet("holdout", encode_rows([r[:2] for r in held], tokenizer, cfg.seq_len,
                                                 frame), retrieval_scores)
        if not dev:
            dev.append(EvalSet("", holdout.arrays, retrieval_scores))
            holdout = None
    if not dev:
        raise UserError("task contrastive needs a dev set: data.glue_dir (STS-B's dev) or "
                        "data.holdout_examples > 0 (retrieval over held-out pairs)")
    metrics = ("spearman", "pearson") if sts_dev is not None else (
        "mrr_at_10", "recall_at_1", "recall_at_10")
    arrays = encode_rows(train, tokenizer, cfg.seq_len, frame)
    if data.teacher:
        arrays["teacher"] = teacher_embeddings(data.teacher, train, width)
    return TaskData(head, (), metrics, arrays, dev, [],
                    holdout=holdout, holdout_metric="mrr_at_10")  # held-out pairs: retrieval
