"""Fine-tuning on a GLUE task: epochs of shuffled batches, dev metrics after each
epoch, the best epoch's parameters kept, test predictions in GLUE's format.

The train step, sharding and optimizer are the pretraining loop's; what differs
is the data (whole epochs of one task, dropping the last partial batch as
run_classifier.py does) and what is kept (the best epoch, not the last).
"""

import math
import os
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from pretrainx import sharding
from pretrainx.errors import UserError
from pretrainx.finetune import config as ft_config
from pretrainx.finetune import scores, tasks
from pretrainx.models import bert, peft as peft_lib
from pretrainx.train import metrics as metrics_lib
from pretrainx.train import optim, state as state_lib, step as step_lib


class TaskLoss:
    """The train step's objective: cross-entropy (or squared error for STS-B) over
    real examples; rows with weight 0 pad a batch."""

    def __init__(self, regression: bool):
        self.regression = regression

    def loss_sums(self, outputs, batch) -> dict:
        logits, w = outputs["logits"], batch["weight"]
        if self.regression:
            err = jnp.square(logits[:, 0] - batch["label"])
            return {"loss_sum": jnp.sum(w * err), "count": jnp.sum(w)}
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"])
        correct = (jnp.argmax(logits, -1) == batch["label"]).astype(jnp.float32)
        return {"loss_sum": jnp.sum(w * ce), "correct_sum": jnp.sum(w * correct),
                "count": jnp.sum(w)}

    def normalizers(self, batch) -> dict:
        return {"n": jnp.maximum(jnp.sum(batch["weight"]), 1.0)}

    def loss(self, sums, norms):
        return sums["loss_sum"] / norms["n"]

    def metrics(self, sums, norms) -> dict:
        return {} if self.regression else {"accuracy": sums["correct_sum"] / norms["n"]}


def encode(split, tokenizer, seq_len: int, regression: bool) -> dict:
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
            longest = max(parts, key=len)
            longest.pop()
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


def _rows(arrays, index):
    return {k: v[index] for k, v in arrays.items()}


def _padded_batches(arrays, batch_size):
    """Every row once, the last batch padded with weight-0 rows."""
    n = len(arrays["label"])
    for start in range(0, n, batch_size):
        index = np.arange(start, start + batch_size)
        batch = _rows(arrays, np.minimum(index, n - 1))
        batch["weight"] = np.where(index < n, batch["weight"], 0.0).astype(np.float32)
        yield batch, min(batch_size, n - start)


def graft(fresh: dict, pretrained, take_head: bool) -> tuple:
    """Pretrained arrays put into a freshly initialised tree of the fine-tuning
    model. Every encoder (and pooler) tensor must be there with the config's shape;
    the task head is taken only from a fine-tuned model of the same labels."""
    taken, new = 0, []
    source = pretrained.source

    def walk(target, have, path):
        nonlocal taken
        out = {}
        for key, value in target.items():
            here = path + (key,)
            if isinstance(value, dict):
                out[key] = walk(value, have.get(key, {}) if isinstance(have, dict) else {}, here)
                continue
            name = "/".join(here)
            is_new = here[0] in bert.BertForFineTuning.head_modules and not take_head
            is_new = is_new or here[-1] in peft_lib._NEW_PARAMS or any(
                p.endswith("adapter") for p in here)
            if is_new or key not in have:
                if not is_new and here[0] in ("bert", "pooler"):
                    raise UserError(f"{source}: no parameter {name} for this model")
                new.append(name)
                out[key] = value
                continue
            if tuple(have[key].shape) != tuple(value.shape):
                raise UserError(f"{source}: parameter {name} has shape {tuple(have[key].shape)}, "
                                f"the config expects {tuple(value.shape)}")
            out[key] = np.asarray(have[key], value.dtype)
            taken += 1
        return out

    return walk(fresh, pretrained.params, ()), taken, new


class _Setup:
    """Model, tokenizer and initial parameters from `init_from` (or random)."""

    def __init__(self, cfg):
        from pretrainx import interop
        from pretrainx.data.tokenizers import load_tokenizer
        self.task = tasks.get_task(cfg.task)
        self.pretrained = interop.load(cfg.init_from) if cfg.init_from else None
        if self.pretrained is not None:
            model_cfg = ml_collections.ConfigDict(self.pretrained.model.to_dict())
            tokenizer_path = cfg.data.tokenizer or self.pretrained.tokenizer
            lower_case = self.pretrained.lower_case
        else:
            model_cfg = ml_collections.ConfigDict(cfg.model.to_dict())
            tokenizer_path, lower_case = cfg.data.tokenizer, cfg.data.lower_case
            if not tokenizer_path:
                raise UserError("config key 'data.tokenizer' is empty and there is no init_from "
                                "to take it from")
        model_cfg.scan_layers = False
        self.model_cfg = model_cfg
        self.tokenizer = load_tokenizer(tokenizer_path, lower_case=lower_case)
        self.lower_case = lower_case
        if self.tokenizer.vocab_size > model_cfg.vocab_size:
            raise UserError(f"tokenizer {tokenizer_path} has {self.tokenizer.vocab_size} ids but "
                            f"the model has {model_cfg.vocab_size}")
        self.peft = peft_lib.from_config(cfg.peft)
        length = cfg.seq_len + self.peft.prompt_length
        if length > model_cfg.max_position_embeddings:
            raise UserError(f"seq_len={cfg.seq_len} (+ {self.peft.prompt_length} prompt tokens) "
                            f"exceeds the model's {model_cfg.max_position_embeddings} positions")
        self.model = bert.BertForFineTuning(model_cfg, "classify", self.task.num_labels, self.peft)
        self.take_head = bool(self.pretrained is not None and self.pretrained.head == "classify"
                              and self.pretrained.labels == self.task.labels)


def _optimizer(cfg, total_steps, setup):
    opt = cfg.optimizer.to_dict()
    opt["warmup_steps"] = int(round(opt.pop("warmup_fraction") * total_steps))
    opt = ml_collections.ConfigDict(opt)
    tx = optim.make_optimizer(opt, total_steps)
    schedule = optim.learning_rate_schedule(opt, total_steps)
    if setup.peft.method != "none":
        heads = bert.BertForFineTuning.head_modules
        tx = optax.multi_transform(
            {"train": tx, "freeze": optax.set_to_zero()},
            lambda params: peft_lib.trainable_labels(params, setup.peft, heads))
    return tx, schedule


def _state_size(opt_state) -> int:
    return int(sum(np.size(x) for x in jax.tree_util.tree_leaves(opt_state)
                   if hasattr(x, "shape") and np.ndim(x) > 0))


def train(cfg, workdir: str, devices=None) -> dict:
    ft_config.validate(cfg)
    setup = _Setup(cfg)
    task = setup.task
    files = tasks.task_files(task, cfg.data.glue_dir)
    train_split = tasks.read_split(task, files["train"], True, cfg.data.max_train_examples)
    dev_splits = [tasks.read_split(task, f, True, cfg.data.max_eval_examples)
                  for f in files["dev"]]
    test_splits = [tasks.read_split(task, f, False) for f in files["test"]]
    encode_split = lambda s: encode(s, setup.tokenizer, cfg.seq_len, task.is_regression)
    train_arrays = encode_split(train_split)
    dev_arrays = [encode_split(s) for s in dev_splits]

    batch = cfg.global_batch_size
    steps_per_epoch = len(train_split.texts) // batch
    if steps_per_epoch == 0:
        raise UserError(f"{files['train']} has {len(train_split.texts)} examples, fewer than "
                        f"one batch of {batch}")
    total_steps = steps_per_epoch * cfg.epochs
    mesh = sharding.make_mesh(cfg.mesh, devices)
    rules = sharding.rules_of(cfg)
    if batch % sharding.data_parallel_size(mesh, rules) or (
            cfg.eval_batch_size % sharding.data_parallel_size(mesh, rules)):
        raise UserError(f"global_batch_size={batch} and eval_batch_size={cfg.eval_batch_size} "
                        f"must divide over {sharding.data_parallel_size(mesh, rules)} devices")
    tx, schedule = _optimizer(cfg, total_steps, setup)
    example = _rows(train_arrays, np.zeros(1, np.int64))
    model, objective = setup.model, TaskLoss(task.is_regression)
    state, shardings = state_lib.create_state(model, tx, example, cfg.seed, mesh, rules)
    fresh = jax.device_get(state.params)
    taken, new = 0, list(jax.tree_util.tree_leaves(fresh))
    if setup.pretrained is not None:
        params, taken, new = graft(fresh, setup.pretrained, setup.take_head)
        state = state.replace(params=jax.device_put(params, shardings.params))
    labels = peft_lib.trainable_labels(fresh, setup.peft, model.head_modules)
    n_total, n_train = peft_lib.count(fresh), peft_lib.count(fresh, labels)
    opt_size = _state_size(state.opt_state)
    log = metrics_lib.log
    log(f"pretrainx finetune: {task.name} from {setup.pretrained.source if setup.pretrained else 'random init'}"
        f" ({taken} tensors loaded; new: {', '.join(new) if len(new) < 8 else f'{len(new)} tensors'})")
    log(f"  parameters {n_total:,}, trainable {n_train:,} ({n_train / n_total:.2%}, "
        f"peft {setup.peft.method}); optimizer state {opt_size:,} values")
    log(f"  {len(train_split.texts)} train examples, {cfg.epochs} epochs of {steps_per_epoch} "
        f"steps, batch {batch}, length {cfg.seq_len}, lr {cfg.optimizer.learning_rate}")

    batch_sharding = sharding.batch_sharding(mesh, rules)
    batch_shardings = {k: batch_sharding for k in example}
    train_step = step_lib.compile_train_step(
        step_lib.make_train_step(model, tx, objective, schedule, 1), mesh, rules, shardings,
        batch_shardings)
    predict = step_lib.Compiled(
        lambda params, b: model.apply({"params": params}, b, deterministic=True)["logits"],
        mesh, rules, in_shardings=(shardings.params, batch_shardings),
        out_shardings=sharding.replicated(mesh))

    def to_global(b):
        return {k: jax.make_array_from_process_local_data(batch_sharding, np.asarray(v))
                for k, v in b.items()}

    def predictions(params, arrays):
        out = []
        for b, real in _padded_batches(arrays, cfg.eval_batch_size):
            logits = np.asarray(jax.device_get(predict(params, to_global(b))))[:real]
            out.append(logits[:, 0] if task.is_regression else logits.argmax(-1))
        return np.concatenate(out)

    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "config.json"), "w", encoding="utf-8") as f:
        f.write(cfg.to_json(sort_keys=True))
    writer = metrics_lib.MetricsWriter(workdir, total_steps)
    base_key = jax.random.key(cfg.seed + 1)
    history, best, best_params, step, skipped_run = [], None, None, 0, 0
    interval = time.perf_counter()
    try:
        for epoch in range(1, cfg.epochs + 1):
            order = np.random.default_rng([cfg.seed, epoch]).permutation(len(train_split.texts))
            buffer = []
            for i in range(steps_per_epoch):
                index = order[i * batch:(i + 1) * batch]
                state, m = train_step(state, to_global(_rows(train_arrays, index)), base_key)
                step += 1
                buffer.append(m)
                if step % cfg.log_every == 0 or i == steps_per_epoch - 1:
                    host = jax.device_get(buffer)
                    skipped_run = _count_skips(host, skipped_run, cfg.max_skipped_steps, step)
                    record = {k: float(np.mean([h[k] for h in host])) for k in host[0]}
                    record.update(step=step, epoch=epoch, learning_rate=float(host[-1]["learning_rate"]),
                                  steps_per_sec=len(host) / (time.perf_counter() - interval))
                    writer.write(record)
                    extra = f" | accuracy {record['accuracy']:.4f}" if "accuracy" in record else ""
                    print(f"epoch {epoch} step {step}/{total_steps} | loss {record['loss']:.4f}"
                          f"{extra} | lr {record['learning_rate']:.2e} | "
                          f"{record['steps_per_sec']:.1f} steps/s", flush=True)
                    buffer, interval = [], time.perf_counter()
            result = {"epoch": epoch, "step": step, "split": "dev"}
            for split, arrays in zip(dev_splits, dev_arrays):
                got = scores.score(task.metrics, arrays["label"], predictions(state.params, arrays))
                suffix = "" if len(dev_splits) == 1 else "_" + os.path.basename(split.path)[4:-4]
                result.update({k + suffix: v for k, v in got.items()})
            main = result[task.metrics[0] + ("" if len(dev_splits) == 1 else "_matched")]
            writer.write(result)
            log(f"dev    epoch {epoch} | " + " | ".join(
                f"{k} {v:.4f}" for k, v in result.items() if k not in ("epoch", "step", "split")))
            history.append(result)
            if best is None or main > best["main"]:
                best = dict(result, main=main)
                best_params = jax.device_get(state.params)
                from pretrainx import interop
                interop.save_finetuned(workdir, best_params, _info(cfg, setup))
            interval = time.perf_counter()
    finally:
        writer.close()
    written = []
    for split, name in zip(test_splits, task.submission):
        preds = predictions(jax.device_put(best_params, shardings.params),
                            encode_split(split))
        written.append(_write_submission(workdir, name, split.indices, preds, task))
    log(f"best dev epoch {best['epoch']}: {task.metrics[0]} {best['main']:.4f}; parameters in "
        f"{workdir}/best" + (f"; test predictions {', '.join(written)}" if written else ""))
    return {"best": best, "history": history, "params": n_total, "trainable_params": n_train,
            "optimizer_state_size": opt_size, "steps": total_steps}


def _count_skips(host, run, limit, step):
    for m in host:
        run = run + 1 if m["skipped"] else 0
        if run >= limit:
            raise UserError(f"loss or gradient not finite for {run} consecutive steps up to "
                            f"step {step} (max_skipped_steps={limit})")
    return run


def _info(cfg, setup) -> dict:
    return {"task": cfg.task, "head": "classify", "labels": list(setup.task.labels),
            "model": setup.model_cfg.to_dict(), "tokenizer": setup.tokenizer.path,
            "lower_case": setup.lower_case, "peft": cfg.peft.to_dict(),
            "init_from": cfg.init_from}


def _write_submission(workdir, name, indices, preds, task) -> str:
    folder = os.path.join(workdir, "predictions")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write("index\tprediction\n")
        for index, value in zip(indices, preds):
            f.write(f"{index}\t{tasks.format_prediction(task, value)}\n")
    return path


def describe(cfg) -> dict:
    ft_config.validate(cfg)
    setup = _Setup(cfg)
    batch = {"input_ids": np.zeros((1, cfg.seq_len), np.int32),
             "token_type_ids": np.zeros((1, cfg.seq_len), np.int32),
             "attention_mask": np.ones((1, cfg.seq_len), np.int32)}
    shapes = jax.eval_shape(lambda: setup.model.init(jax.random.key(0), batch))
    from flax import linen as nn
    params = nn.unbox(shapes["params"])
    labels = peft_lib.trainable_labels(params, setup.peft, setup.model.head_modules)
    return {"task": cfg.task, "init_from": cfg.init_from or None,
            "params": peft_lib.count(params), "trainable_params": peft_lib.count(params, labels),
            "peft": setup.peft.method, "num_labels": setup.task.num_labels,
            "metrics": list(setup.task.metrics), "epochs": cfg.epochs,
            "global_batch_size": cfg.global_batch_size, "seq_len": cfg.seq_len,
            "learning_rate": cfg.optimizer.learning_rate}
