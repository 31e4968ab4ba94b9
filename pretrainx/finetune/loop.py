"""Fine-tuning on a GLUE task: epochs of shuffled batches, dev metrics after each
epoch, the best epoch's parameters kept, test predictions in GLUE's format.

The loop (train/loop.py's `run_steps`), its hook protocol, the train step, sharding
and optimizer are pretraining's; what differs is the run (finetune/epochs.py: whole
epochs of one task, dropping the last partial batch as run_classifier.py does), its
hooks (the progress line, the scores at each epoch's end) and what is kept (the best
epoch, not the last).
"""

import functools
import os
import shutil

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import linen as nn

from pretrainx import interop, models, registry, sharding
from pretrainx.data.tokenizers import load_tokenizer
from pretrainx.errors import UserError
from pretrainx.finetune import config as ft_config
from pretrainx.finetune import contrastive, epochs as epochs_lib, layerwise, task_data
from pretrainx.models import attention, heads, peft as peft_lib
from pretrainx.train import checkpoint as checkpoint_lib, hooks as hooks_lib
from pretrainx.train import loop as loop_lib
from pretrainx.train import metrics as metrics_lib
from pretrainx.train import optim, schedules, state as state_lib, step as step_lib

# What a task adds beside the pretrained model (trained under every PEFT method)
TASK_PARAMS = heads.HEAD_MODULES + (contrastive.SCALE,)


class TaskLoss:
    """The train step's objective: cross-entropy over real examples (tokens for NER,
    start and end positions for QA), squared error for regression; weight 0 marks
    padding rows and the tokens that carry no label."""

    def __init__(self, head: str, regression: bool):
        self.head, self.regression = head, regression

    def loss_sums(self, outputs, batch) -> dict:
        logits, w = outputs["logits"], batch["weight"]
        if self.regression:
            err = jnp.square(logits[:, 0] - batch["label"])
            return {"loss_sum": jnp.sum(w * err), "count": jnp.sum(w)}
        ce = optax.softmax_cross_entropy_with_integer_labels
        if self.head == "seq2seq":  # teacher-forced target tokens, as T5 trains
            w, targets = batch["decoder_loss_weights"], batch["decoder_target_tokens"]
            loss, correct = ce(logits, targets), jnp.argmax(logits, -1) == targets
        elif self.head == "span":
            start, end = logits[..., 0], logits[..., 1]
            loss = (ce(start, batch["start"]) + ce(end, batch["end"])) / 2
            correct = ((jnp.argmax(start, -1) == batch["start"])
                       & (jnp.argmax(end, -1) == batch["end"]))
        else:
            loss = ce(logits, batch["label"])
            correct = jnp.argmax(logits, -1) == batch["label"]
        return {"loss_sum": jnp.sum(w * loss),
                "correct_sum": jnp.sum(w * correct.astype(jnp.float32)), "count": jnp.sum(w)}

    def normalizers(self, batch) -> dict:
        w = batch["decoder_loss_weights"] if self.head == "seq2seq" else batch["weight"]
        return {"n": jnp.maximum(jnp.sum(w), 1.0)}

    def loss(self, sums, norms):
        return sums["loss_sum"] / norms["n"]

    def metrics(self, sums, norms) -> dict:
        return {} if self.regression else {"accuracy": sums["correct_sum"] / norms["n"]}


def _padded_batches(arrays, batch_size):
    """Every row once, the last batch padded with copies of the last row."""
    n = len(next(iter(arrays.values())))
    for start in range(0, n, batch_size):
        index = np.arange(start, start + batch_size)
        yield epochs_lib.rows(arrays, np.minimum(index, n - 1)), min(batch_size, n - start)


def graft(fresh: dict, pretrained, take_head: bool) -> tuple:
    """Pretrained arrays in the fine-tuning model's fresh tree: the task head only from
    a fine-tuned model of the same labels, a peft method's parameters always fresh, a
    missing pooler (BertForMaskedLM-style checkpoints) fresh, as in transformers."""
    return interop.graft(
        fresh, pretrained,
        keep_fresh=lambda path: ((path[0] in heads.HEAD_MODULES and not take_head)
                                 or peft_lib.added_by_a_method(path)),
        may_be_missing=lambda path: path[0] == "pooler")


class _Setup:
    """Tokenizer, task data, model and initial parameters from `init_from` (or random)."""

    def __init__(self, cfg):
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
        if cfg.task == "contrastive" and cfg.data.simcse:  # the views differ by dropout
            model_cfg.dropout_rate = cfg.data.simcse_dropout
            model_cfg[attention.attention_dropout_key(model_cfg)] = cfg.data.simcse_dropout
        self.model_cfg = model_cfg
        name = models.family_name(model_cfg)
        self.family = models.FAMILIES.find(name)
        if self.family is None or self.family.finetune_model is None:
            tuned = [f.name for f in models.FAMILIES.entries() if f.finetune_model]
            raise UserError(f"init_from {cfg.init_from} is a {name} model; fine-tuning takes "
                            f"{', '.join(tuned)} models")
        self.tokenizer = load_tokenizer(tokenizer_path, lower_case=lower_case,
                                        layout=self.family.tokenizer_layout)
        self.lower_case = lower_case
        if self.tokenizer.vocab_size > model_cfg.vocab_size:
            raise UserError(f"tokenizer {tokenizer_path} has {self.tokenizer.vocab_size} ids but "
                            f"the model has {model_cfg.vocab_size}")
        self.peft = peft_lib.from_config(cfg.peft)
        if not self.family.peft and self.peft.method != "none":
            raise UserError(f"peft.method={self.peft.method} is built for BERT encoders; a "
                            f"{name} init_from fine-tunes fully (peft.method=none)")
        length = cfg.seq_len + self.peft.prompt_length
        limit = model_cfg.get(self.family.max_positions) if self.family.max_positions else None
        if limit is not None:  # RoBERTa's positions start at 2: 514 rows hold 512 tokens
            limit -= model_cfg.get("position_offset", 0)
        if limit is not None and length > limit:
            raise UserError(f"seq_len={cfg.seq_len} (+ {self.peft.prompt_length} prompt tokens) "
                            f"exceeds the model's {limit} positions")
        frame = functools.partial(registry.text_ids, self.family, self.tokenizer)
        self.data = task_data.build(cfg, self.tokenizer, self._as_text(cfg, name),
                                    self.family.text_framing, frame=frame,
                                    width=model_cfg.get("hidden_size", 0))

    def _as_text(self, cfg, name) -> bool:
        mode = self.family.text_to_text
        if cfg.text_to_text and mode == "never":
            raise UserError(f"config key 'text_to_text' is True but a {name} model fine-tunes "
                            "with heads only")
        return mode == "always" or (mode == "optional" and cfg.text_to_text)

    def model(self, head: str, num_labels: int):
        return self.family.finetune_model(self.model_cfg, head, num_labels, self.peft)

    def takes_head(self, data) -> bool:
        """A fine-tuned model's head carries over to the same head with the same labels."""
        return bool(self.pretrained is not None and self.pretrained.head == data.head
                    and self.pretrained.labels == data.labels)


def _optimizer(cfg, total_steps, peft, shapes, steps_per_epoch):
    """The recipe's optimizer; PEFT freezes what its method leaves out; ULMFiT's
    layer-wise rates and gradual unfreezing (finetune/layerwise.py) wrap it."""
    opt = cfg.optimizer.to_dict()
    opt["warmup_steps"] = int(round(opt.pop("warmup_fraction") * total_steps))
    opt = ml_collections.ConfigDict(opt)
    tx = optim.make_optimizer(opt, total_steps)
    schedule = schedules.learning_rate_schedule(opt, total_steps)
    if peft.method != "none":
        tx = optax.multi_transform(
            {"train": tx, "freeze": optax.set_to_zero()},
            lambda params: peft_lib.trainable_labels(params, peft, TASK_PARAMS))
    if opt.freeze_embeddings:  # depth 0 (the embeddings) never moves
        depth, _ = layerwise.depths(shapes, TASK_PARAMS)
        tx = optax.multi_transform(
            {"train": tx, "freeze": optax.set_to_zero()},
            jax.tree_util.tree_map(lambda d: "freeze" if d == 0 else "train", depth))
    if opt.layer_lr_decay < 1 or opt.gradual_unfreezing:
        depth, top = layerwise.depths(shapes, TASK_PARAMS)
        tx = optim.layerwise(
            tx, layerwise.learning_rate_scales(depth, top, opt.layer_lr_decay),
            layerwise.unfreeze_steps(depth, top, steps_per_epoch, opt.gradual_unfreezing))
        unfrozen = min(cfg.epochs, top + 1) if opt.gradual_unfreezing else top + 1
        metrics_lib.log(f"  ULMFiT: layer_lr_decay {opt.layer_lr_decay} over {top + 1} depths "
                        f"(embeddings x{opt.layer_lr_decay ** top:.3g}); gradual unfreezing "
                        f"{'on' if opt.gradual_unfreezing else 'off'}: the top {unfrozen} of "
                        f"{top + 1} depths train by the last epoch")
    return tx, schedule


def _state_size(opt_state) -> int:
    return int(sum(np.size(x) for x in jax.tree_util.tree_leaves(opt_state)
                   if hasattr(x, "shape") and np.ndim(x) > 0))


def train(cfg, workdir: str, devices=None, stop_at: int | None = None) -> dict:
    """Fine-tune for cfg.epochs; returns the best dev result, the history and sizes.
    A checkpoint at each epoch's end (and when a signal stops the run) lets the same
    call resume; `stop_at` ends the run early at that step with a checkpoint, as a
    signal would (`complete` False)."""
    ft_config.validate(cfg)
    setup = _Setup(cfg)
    data = setup.data
    n_train = len(data.train["weight"])
    batch = cfg.global_batch_size
    steps_per_epoch = n_train // batch
    if steps_per_epoch == 0:
        raise UserError(f"task {cfg.task} has {n_train} training examples, fewer than one "
                        f"batch of {batch}")
    total_steps = steps_per_epoch * cfg.epochs
    mesh = sharding.make_mesh(cfg.mesh, devices)
    rules = sharding.rules_of(cfg)
    dp = sharding.data_parallel_size(mesh, rules)
    if batch % dp or cfg.eval_batch_size % dp:
        raise UserError(f"global_batch_size={batch} and eval_batch_size={cfg.eval_batch_size} "
                        f"must divide over {dp} data-parallel devices")
    example = epochs_lib.rows(data.train, np.zeros(1, np.int64))
    model = setup.model(data.head, data.num_labels)
    embeds = data.head.startswith("embed_")  # rows of texts -> their embeddings
    if embeds:
        model = contrastive.Paired(
            model, cfg.data.temperature if cfg.data.learn_temperature else 0.0)
    shapes = nn.unbox(jax.eval_shape(lambda: model.init(jax.random.key(0), example))["params"])
    tx, schedule = _optimizer(cfg, total_steps, setup.peft, shapes, steps_per_epoch)
    if embeds:  # a sentence embedder: its width bounds the Matryoshka widths
        dims = contrastive.matryoshka_dims(cfg.data.matryoshka_dims,
                                           setup.model_cfg.hidden_size)
        objective = contrastive.InfoNceLoss(cfg.data.temperature, dims, cfg.data.distill_loss,
                                            cfg.data.distill_weight)
    else:
        objective = TaskLoss(data.head, data.regression)
    state, shardings = state_lib.create_state(model, tx, example, cfg.seed, mesh, rules)
    fresh = jax.device_get(state.params)
    taken, new = 0, ["all"]
    if setup.pretrained is not None:
        params, taken, new = graft(fresh, setup.pretrained, setup.takes_head(data))
        state = state.replace(params=jax.device_put(params, shardings.params))
    labels = peft_lib.trainable_labels(fresh, setup.peft, TASK_PARAMS)
    n_params, n_trainable = peft_lib.count(fresh), peft_lib.count(fresh, labels)
    opt_size = _state_size(state.opt_state)
    log = metrics_lib.log
    source = setup.pretrained.source if setup.pretrained else "random init"
    log(f"pretrainx finetune: {cfg.task} ({data.head}) from {source} ({taken} tensors loaded; "
        f"new: {', '.join(new) if len(new) < 8 else f'{len(new)} tensors'})")
    log(f"  parameters {n_params:,}, trainable {n_trainable:,} "
        f"({n_trainable / n_params:.2%}, peft {setup.peft.method}); "
        f"optimizer state {opt_size:,} values")
    log(f"  {n_train} train examples, {cfg.epochs} epochs of {steps_per_epoch} steps, "
        f"batch {batch}, length {cfg.seq_len}, lr {cfg.optimizer.learning_rate}")

    batch_sharding = sharding.batch_sharding(mesh, rules)
    batch_shardings = {k: batch_sharding for k in example}
    train_step = step_lib.compile_train_step(
        step_lib.make_train_step(model, tx, objective, schedule, 1), mesh, rules, shardings,
        batch_shardings)
    inputs = data.predict_inputs
    if data.head == "seq2seq":
        target_len = data.train["decoder_target_tokens"].shape[1]
        tok = setup.tokenizer
        forward = lambda params, b: setup.family.generate(
            setup.model_cfg, params, b["encoder_input_tokens"], b["encoder_segment_ids"],
            target_len, tok.sep_id, tok.pad_id, 1)
    else:
        forward = lambda params, b: model.apply({"params": params}, b,
                                                deterministic=True)["logits"]
    predict = step_lib.Compiled(
        forward, mesh, rules, in_shardings=(shardings.params, {k: batch_sharding for k in inputs}),
        out_shardings=sharding.replicated(mesh))

    def to_global(b):
        return {k: jax.make_array_from_process_local_data(batch_sharding, np.asarray(v))
                for k, v in b.items()}

    def outputs(params, arrays):
        parts = []
        for b, real in _padded_batches({k: arrays[k] for k in inputs}, cfg.eval_batch_size):
            parts.append(np.asarray(jax.device_get(predict(params, to_global(b))))[:real])
        return np.concatenate(parts)

    main_key = data.metrics[0] + (f"_{data.dev[0].name}" if data.dev[0].name else "")

    def dev_scores(params) -> dict:
        scores = {}
        for dev in data.dev:
            got = dev.score(outputs(params, dev.arrays))
            scores.update({k + (f"_{dev.name}" if dev.name else ""): v for k, v in got.items()})
        return scores

    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "config.json"), "w", encoding="utf-8") as f:
        f.write(cfg.to_json(sort_keys=True))
    writer = metrics_lib.MetricsWriter(workdir, total_steps)
    chooser = "dev" if data.holdout is None else "holdout"

    def score(params):
        if data.holdout is None:  # dev chooses the epoch: scored every epoch
            scores = dev_scores(params)
            return scores, scores[main_key]
        # the held-out training rows choose; dev is scored at the chosen epoch
        got = data.holdout.score(outputs(params, data.holdout.arrays))
        scores = {f"holdout_{k}": v for k, v in got.items()}
        return scores, scores[f"holdout_{data.holdout_metric or data.metrics[0]}"]

    def keep(result, best, params):  # held-out rows choose: dev is scored at the end
        if data.holdout is None:
            best["dev_main"] = result[main_key]
            interop.save_finetuned(workdir, contrastive.without_scale(params),
                                   _info(cfg, setup, data, result))

    ckpt = checkpoint_lib.Checkpointer(workdir, keep=1, save_every=0)
    run = epochs_lib.Epochs(data.train, batch, cfg.epochs, cfg.seed, state, train_step,
                            to_global, sharding.replicated(mesh), ckpt,
                            cfg.to_json(sort_keys=True))
    epochs_lib.resume(run, state, shardings, cfg)
    if stop_at is not None:
        run.end = min(run.end, stop_at)
    progress = epochs_lib.Progress(writer, cfg.log_every, cfg.max_skipped_steps)
    checkpoint = hooks_lib.Checkpoint()
    hooks = [progress, epochs_lib.EpochEnd(writer, chooser, score, keep, progress,
                                           cfg.early_stopping_epochs), checkpoint]
    try:
        loop_lib.run_steps(run, hooks, clock=lambda r: (r.step, 1))
        complete = run.step == total_steps or run.stopped_early
        if complete and data.holdout is not None:  # dev once, at the epoch it chose
            best = run.best
            chosen = dev_scores(jax.device_put(run.best_params, shardings.params))
            run.history[best["epoch"] - 1].update(chosen)
            best.update(chosen, dev_main=chosen[main_key])
            writer.write({"epoch": best["epoch"], "step": best["step"], "split": "dev",
                          **chosen})
            log(f"dev     chosen epoch {best['epoch']} | " + " | ".join(
                f"{k} {v:.4f}" for k, v in chosen.items()))
            interop.save_finetuned(workdir, contrastive.without_scale(run.best_params),
                                   _info(cfg, setup, data, run.history[best["epoch"] - 1]))
    finally:
        checkpoint.close()
        writer.close()
        ckpt.close()
    sizes = {"params": n_params, "trainable_params": n_trainable,
             "optimizer_state_size": opt_size, "steps": total_steps}
    if not complete:
        log(f"stopped by {checkpoint.signal_name or 'stop_at'} at step {run.step}/"
            f"{total_steps}; checkpoint {run.step} saved in {ckpt.directory}; run the same "
            "command to resume")
        return {"best": run.best, "history": run.history, "test": {}, "complete": False,
                "step": run.step, **sizes}
    if jax.process_index() == 0:  # the run's product is best/: a resume needs no more
        shutil.rmtree(ckpt.directory, ignore_errors=True)
    on_device = jax.device_put(run.best_params, shardings.params)
    written, test_results = [], {}
    for test in data.test if cfg.predict_test else ():
        out = outputs(on_device, test.arrays)
        if test.score is not None:
            test_results.update({f"{k}_{test.name}": v for k, v in test.score(out).items()})
        if test.write is not None:
            written.append(test.write(workdir, out))
    if test_results:
        log("test   best epoch | " + " | ".join(f"{k} {v:.4f}" for k, v in test_results.items()))
    log(f"best {chooser} epoch {run.best['epoch']}: {main_key} {run.best['dev_main']:.4f} on "
        f"dev; parameters in {workdir}/best"
        + (f"; predictions {', '.join(written)}" if written else ""))
    return {"best": run.best, "history": run.history, "test": test_results, "complete": True,
            "step": run.step, **sizes}


def _info(cfg, setup, data, dev: dict) -> dict:
    """What the kept parameters are, with the dev scores that chose them (`dev`)."""
    return {"task": cfg.task, "head": data.head, "labels": list(data.labels),
            "dev": epochs_lib.plain(dev),
            "model": setup.model_cfg.to_dict(), "tokenizer": setup.tokenizer.path,
            "lower_case": setup.lower_case, "peft": cfg.peft.to_dict(),
            "init_from": cfg.init_from,
            "num_sentinels": setup.pretrained.num_sentinels if setup.pretrained else 0,
            # the widths a sentence embedder was trained at (its export's model card)
            "matryoshka_dims": list(contrastive.matryoshka_dims(cfg.data.matryoshka_dims, None))
            if data.head.startswith("embed_") else []}


def describe(cfg) -> dict:
    """The run's shape without training: parameter counts, what trains, the recipe."""
    ft_config.validate(cfg)
    setup = _Setup(cfg)
    data = setup.data
    model = setup.model(data.head, data.num_labels)
    batch = epochs_lib.rows(data.train, np.zeros(1, np.int64))
    params = nn.unbox(jax.eval_shape(lambda: model.init(jax.random.key(0), batch))["params"])
    labels = peft_lib.trainable_labels(params, setup.peft, TASK_PARAMS)
    n_train = len(data.train["weight"])
    return {"task": cfg.task, "head": data.head, "init_from": cfg.init_from or None,
            "params": peft_lib.count(params), "trainable_params": peft_lib.count(params, labels),
            "peft": setup.peft.method, "num_labels": data.num_labels,
            "metrics": list(data.metrics), "train_examples": n_train, "epochs": cfg.epochs,
            "steps": cfg.epochs * (n_train // cfg.global_batch_size),
            "global_batch_size": cfg.global_batch_size, "seq_len": cfg.seq_len,
            "learning_rate": cfg.optimizer.learning_rate}
