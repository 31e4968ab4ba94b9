"""Our own workdirs as `Pretrained` models: a pretraining run (its newest
checkpoint, read the way its objective says) or a fine-tuning run (its best epoch)."""

import json
import os
import shutil

import ml_collections
import orbax.checkpoint as ocp

from pretrainx import models, objectives
from pretrainx.errors import UserError
from pretrainx.interop.pretrained import Pretrained, read_json, to_numpy, unstack_layers

FINETUNE_FILE = "finetune.json"


def load_pretraining(path: str, step: int | None = None) -> Pretrained:
    """The model of a pretraining run at `step` (None: its latest checkpoint)."""
    cfg = ml_collections.ConfigDict(read_json(os.path.join(path, "config.json")))
    entry = objectives.OBJECTIVES.find(cfg.get("objective"))
    if entry is None or entry.as_pretrained is None:
        readable = [e.name for e in objectives.OBJECTIVES.entries() if e.as_pretrained]
        raise UserError(f"{path}: a {cfg.get('objective')!r} pretraining run; its model is "
                        f"read from runs of the objectives {', '.join(readable)}")
    manager = ocp.CheckpointManager(os.path.abspath(os.path.join(path, "checkpoints")),
                                    item_names=("state", "data", "config"))
    if step is None:
        step = manager.latest_step()
    held = sorted(manager.all_steps())
    if step is None or step not in held:
        manager.close()
        raise UserError(f"{path}/checkpoints holds no checkpoint" + (
            f" at step {step} (it holds {held})" if step is not None else ""))
    try:
        state = manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore()))["state"]
    except Exception as e:  # a damaged checkpoint: say which
        raise UserError(f"checkpoint {path}/checkpoints/{step} does not restore: "
                        f"{type(e).__name__}: {str(e).splitlines()[0][:200]}") from None
    finally:
        manager.close()
    model = entry.defaults().model
    model.update(cfg.model)
    model, params, head = entry.as_pretrained(model, unstack_layers(to_numpy(state["params"])))
    return Pretrained(model=model, params=params,
                      tokenizer=cfg.data.tokenizer, lower_case=cfg.data.lower_case, head=head,
                      source=f"{path}/checkpoints/{step}",
                      num_sentinels=cfg.data.get("num_sentinels", 0))


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
    model = models.family(info["model"].get("family", "bert")).default_config()
    model.update(info["model"])
    return Pretrained(model=model, params=unstack_layers(to_numpy(params)),
                      tokenizer=info["tokenizer"], lower_case=info["lower_case"],
                      head=info["head"], source=f"{path}/best", labels=tuple(info["labels"]),
                      task=info["task"], peft=info.get("peft"),
                      num_sentinels=info.get("num_sentinels", 0))


