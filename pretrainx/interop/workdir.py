"""Our own workdirs as `Pretrained` models: a pretraining run (its newest
checkpoint, read the way its objective says) or a fine-tuning run (its best epoch)."""

import json
import os
import shutil
import sys

import ml_collections
import orbax.checkpoint as ocp

from pretrainx import config as config_lib
from pretrainx import models, objectives
from pretrainx.errors import UserError
import pretrainx.interop.model_card as model_card
from pretrainx.interop.pretrained import Pretrained, read_json, to_numpy, unstack_layers

FINETUNE_FILE = "finetune.json"


def load_pretraining(path: str, step: int | None = None) -> Pretrained:
    """The model of a pretraining run at `step` (None: its latest checkpoint), built from
    the config stored in that checkpoint: WORKDIR/config.json is only the latest run's
    copy, and an edited one (another activation, another depth) would build another
    model around the weights. A config.json whose model disagrees is named in a warning."""
    manager = ocp.CheckpointManager(os.path.abspath(os.path.join(path, "checkpoints")),
                                    item_names=("state", "data", "config"))
    try:
        if step is None:
            step = manager.latest_step()
        held = sorted(manager.all_steps())
        if step is None or step not in held:
            raise UserError(f"{path}/checkpoints holds no checkpoint" + (
                f" at step {step} (it holds {held})" if step is not None else ""))
        cfg = ml_collections.ConfigDict(_stored_config(manager, step, path))
        entry = objectives.OBJECTIVES.find(_trained(cfg, step).get("objective"))
        if entry is None or entry.as_pretrained is None:
            readable = [e.name for e in objectives.OBJECTIVES.entries() if e.as_pretrained]
            raise UserError(f"{path}: a {cfg.get('objective')!r} pretraining run; its model "
                            f"is read from runs of the objectives {', '.join(readable)}")
        try:
            state = manager.restore(step, args=ocp.args.Composite(
                state=ocp.args.StandardRestore()))["state"]
        except Exception as e:  # a damaged checkpoint: say which
            raise UserError(f"checkpoint {path}/checkpoints/{step} does not restore: "
                            f"{type(e).__name__}: {str(e).splitlines()[0][:200]}") from None
    finally:
        manager.close()
    model = entry.defaults().model
    model.update(trained_model(cfg, step))
    model, params, head = entry.as_pretrained(model, unstack_layers(to_numpy(state["params"])))
    return Pretrained(model=model, params=params,
                      tokenizer=cfg.data.tokenizer, lower_case=cfg.data.lower_case, head=head,
                      source=f"{path}/checkpoints/{step}",
                      num_sentinels=cfg.data.get("num_sentinels", 0),
                      run=_pretraining_run(path, cfg, step))


def trained_model(cfg, step: int):
    """The model keys the steps before checkpoint `step` trained with: those of the phase
    it ends (a named phase may set its own RoPE bases, window or positions, and keys a
    phase sets carry into the phases after it), else the run's."""
    return _trained(cfg, step).model


def _trained(cfg, step: int):
    """The config of the phase that checkpoint `step` ends (its objective too: a phase
    may switch it), else the run's."""
    try:
        phase = config_lib.phase_at(cfg, max(step - 1, 0))
    except (KeyError, AttributeError, TypeError):  # a config from before phases existed
        return cfg
    return phase.cfg or cfg


def _pretraining_run(path: str, cfg, step: int) -> dict:
    """What a pretraining run recorded by `step`, for the export's model card (`cfg`: the
    config stored in that checkpoint; a key an older run lacks is left out)."""
    o = cfg.optimizer
    try:
        tokens = model_card.trained_tokens(config_lib.phases(cfg), step)
    except (KeyError, AttributeError):  # a config from before a phase key existed
        tokens = None
    return {"objective": cfg.objective, "step": step, "total_steps": cfg.total_steps,
            "tokens": tokens, "train_files": cfg.data.train_files,
            "init_from": cfg.get("init_from", ""),
            "recipe": {"optimizer": o.name, "learning_rate": o.learning_rate,
                       "schedule": o.schedule, "global_batch_size": cfg.global_batch_size,
                       "seq_len": cfg.seq_len},
            "eval": model_card.run_record(path, step),
            # the mask of a decoder's masked objective (MNTP, MDLM) whose tokenizer has none
            "mask_token": cfg.data.get("mask_token"),
            # an MDLM instruction tuning's rows: [CLS] prompt [SEP] response [SEP]
            "response_only": bool(cfg.data.get("response_only"))}


def _stored_config(manager, step: int, path: str) -> dict:
    """The checkpoint's own config; WORKDIR/config.json where a checkpoint has none.
    Model keys where the two disagree are named on stderr."""
    on_disk_file = os.path.join(path, "config.json")
    on_disk = read_json(on_disk_file) if os.path.isfile(on_disk_file) else None
    try:
        stored = manager.restore(step, args=ocp.args.Composite(
            config=ocp.args.JsonRestore()))["config"]
    except Exception:
        if on_disk is None:
            raise UserError(f"{path}/checkpoints/{step} holds no config and there is no "
                            f"{on_disk_file}") from None
        return on_disk
    if on_disk is not None:
        differ = sorted(k for k in set(stored.get("model", {})) | set(on_disk.get("model", {}))
                        if stored.get("model", {}).get(k) != on_disk.get("model", {}).get(k))
        if on_disk.get("objective") != stored.get("objective"):
            differ.insert(0, "objective")
        if differ:
            print(f"warning: {on_disk_file} disagrees with checkpoint {step} on "
                  f"{', '.join(differ[:8])}; the checkpoint's config is used",
                  file=sys.stderr, flush=True)
    return stored


def save_finetuned(workdir: str, params, info: dict) -> None:
    """The best parameters of a fine-tuning run (Orbax) and what they are (JSON)."""
    target = os.path.abspath(os.path.join(workdir, "best"))
    if os.path.exists(target):
        shutil.rmtree(target)
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(target, params)
    with open(os.path.join(workdir, FINETUNE_FILE), "w", encoding="utf-8") as f:
        json.dump(info, f, indent=1, sort_keys=True)


def load_finetuned(path: str) -> Pretrained:
    info = read_json(os.path.join(path, FINETUNE_FILE))
    try:
        with ocp.StandardCheckpointer() as ckptr:
            params = ckptr.restore(os.path.abspath(os.path.join(path, "best")))
    except Exception as e:
        raise UserError(f"{path}/best does not restore: {type(e).__name__}: "
                        f"{str(e).splitlines()[0][:200]}") from None
    model = models.family(models.family_name(info["model"])).default_config()
    model.update(info["model"])
    return Pretrained(model=model, params=unstack_layers(to_numpy(params)),
                      tokenizer=info["tokenizer"], lower_case=info["lower_case"],
                      head=info["head"], source=f"{path}/best", labels=tuple(info["labels"]),
                      task=info["task"], peft=info.get("peft"),
                      num_sentinels=info.get("num_sentinels", 0),
                      run={"task": info["task"], "init_from": info.get("init_from", ""),
                           "eval": info.get("dev"),
                           "matryoshka_dims": info.get("matryoshka_dims", [])})


