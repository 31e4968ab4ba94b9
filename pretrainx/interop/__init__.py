"""Models in and out: our workdirs (pretraining or fine-tuning) and HuggingFace
directories, as one `Pretrained` record of config, parameters and tokenizer."""

import dataclasses
import json
import os
import shutil

import ml_collections
import numpy as np

from pretrainx.errors import UserError

FINETUNE_FILE = "finetune.json"


@dataclasses.dataclass
class Pretrained:
    model: ml_collections.ConfigDict  # our model.* keys
    params: dict  # float32 numpy, layers unrolled (layer_0, layer_1, ...)
    tokenizer: str  # path of vocab.txt or a SentencePiece .model
    lower_case: bool
    head: str  # pretrain | classify | tokens | span | encoder (BERT); seq2seq (T5); causal_lm
    source: str
    labels: tuple | None = None  # a fine-tuned head's labels (() for regression)
    task: str | None = None
    peft: dict | None = None  # a fine-tuning run's peft section
    num_sentinels: int = 0  # T5: the <extra_id_N> ids past the SentencePiece pieces

    @property
    def family(self) -> str:
        return self.model.family


_STACKS = ("layers", "encoders", "decoders")  # scan_layers' stacked subtrees


def unstack_layers(params: dict) -> dict:
    """scan_layers' stacked `layers` subtree -> layer_0, layer_1, ... (anywhere in the tree)."""
    out = {}
    for key, value in params.items():
        if key in _STACKS and isinstance(value, dict):
            import jax
            n = jax.tree_util.tree_leaves(value)[0].shape[0]
            prefix = key[:-1]
            for i in range(n):
                out[f"{prefix}_{i}"] = jax.tree_util.tree_map(lambda x, i=i: x[i], value)
        elif isinstance(value, dict):
            out[key] = unstack_layers(value)
        else:
            out[key] = value
    return out


def stack_layers(params: dict, like: dict) -> dict:
    """The inverse of `unstack_layers`, shaped as `like` (a scanned model's params)."""
    import jax
    out = {}
    for key, value in like.items():
        if key in _STACKS and isinstance(value, dict):
            prefix = key[:-1]
            n = jax.tree_util.tree_leaves(value)[0].shape[0]
            parts = [params[f"{prefix}_{i}"] for i in range(n)]
            out[key] = jax.tree_util.tree_map(lambda *xs: np.stack(xs), *parts)
        elif isinstance(value, dict):
            out[key] = stack_layers(params.get(key, {}), value)
        elif key in params:
            out[key] = params[key]
    return out


def _to_numpy(tree):
    import jax
    return jax.tree_util.tree_map(lambda x: np.asarray(x, np.float32), tree)


def _read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read {path}: {e}") from None


def load(path: str) -> Pretrained:
    """A pretraining workdir, a fine-tuning workdir or a HuggingFace directory."""
    path = os.path.expanduser(path)
    if "://" not in path and not os.path.isdir(path):
        raise UserError(f"init_from {path} is not a directory")
    if os.path.isfile(os.path.join(path, FINETUNE_FILE)):
        return _load_finetuned(path)
    if os.path.isdir(os.path.join(path, "checkpoints")):
        return _load_pretraining(path)
    if os.path.isfile(os.path.join(path, "config.json")):
        from pretrainx.interop import hf
        return hf.load(path)
    if os.path.isfile(os.path.join(path, "bert_config.json")):
        from pretrainx.interop import tf_bert
        return tf_bert.load(path)
    raise UserError(f"{path} is neither a pretrainx workdir (checkpoints/, {FINETUNE_FILE}), "
                    "a HuggingFace model directory (config.json) nor a google-research BERT "
                    "checkpoint (bert_config.json)")


def _load_pretraining(path: str) -> Pretrained:
    import orbax.checkpoint as ocp
    from pretrainx import config as config_lib
    cfg = ml_collections.ConfigDict(_read_json(os.path.join(path, "config.json")))
    objective = cfg.get("objective")
    if objective not in ("bert", "t5", "causal_lm", "electra"):
        raise UserError(f"{path}: a {objective!r} pretraining run; export takes BERT, T5, "
                        "GPT-2 and ELECTRA runs")
    manager = ocp.CheckpointManager(os.path.abspath(os.path.join(path, "checkpoints")),
                                    item_names=("state", "data", "config"))
    step = manager.latest_step()
    if step is None:
        raise UserError(f"{path}/checkpoints holds no checkpoint")
    try:
        state = manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore()))["state"]
    except Exception as e:  # a damaged checkpoint: say which
        raise UserError(f"checkpoint {path}/checkpoints/{step} does not restore: "
                        f"{type(e).__name__}: {str(e).splitlines()[0][:200]}") from None
    finally:
        manager.close()
    model = config_lib.default_config(objective).model
    model.update(cfg.model)
    params = unstack_layers(_to_numpy(state["params"]))
    if objective == "electra":  # the discriminator is the model: a BERT encoder
        from pretrainx.models import electra
        model, params = electra.discriminator_as_bert(model, params)
    return Pretrained(model=model, params=params,
                      tokenizer=cfg.data.tokenizer, lower_case=cfg.data.lower_case,
                      head={"bert": "pretrain", "t5": "seq2seq",
                            "electra": "encoder"}.get(objective, "causal_lm"),
                      source=f"{path}/checkpoints/{step}",
                      num_sentinels=cfg.data.get("num_sentinels", 0))


def save_finetuned(workdir: str, params, info: dict) -> None:
    """The best parameters of a fine-tuning run (Orbax) and what they are (JSON)."""
    import orbax.checkpoint as ocp
    target = os.path.abspath(os.path.join(workdir, "best"))
    if os.path.exists(target):
        shutil.rmtree(target)
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(target, params)
    with open(os.path.join(workdir, FINETUNE_FILE), "w", encoding="utf-8") as f:
        json.dump(info, f, indent=1, sort_keys=True)


def _load_finetuned(path: str) -> Pretrained:
    import orbax.checkpoint as ocp
    from pretrainx import config as config_lib
    info = _read_json(os.path.join(path, FINETUNE_FILE))
    try:
        with ocp.StandardCheckpointer() as ckptr:
            params = ckptr.restore(os.path.abspath(os.path.join(path, "best")))
    except Exception as e:
        raise UserError(f"{path}/best does not restore: {type(e).__name__}: "
                        f"{str(e).splitlines()[0][:200]}") from None
    model = config_lib.default_config(info["model"].get("family", "bert")).model
    model.update(info["model"])
    return Pretrained(model=model, params=unstack_layers(_to_numpy(params)),
                      tokenizer=info["tokenizer"], lower_case=info["lower_case"],
                      head=info["head"], source=f"{path}/best", labels=tuple(info["labels"]),
                      task=info["task"], peft=info.get("peft"),
                      num_sentinels=info.get("num_sentinels", 0))


def graft(fresh: dict, pretrained: Pretrained, keep_fresh=lambda path: False,
          may_be_missing=lambda path: False) -> tuple:
    """`fresh` (a model's initialised parameters, numpy) with `pretrained`'s tensors put
    in their places, except where `keep_fresh(path)`. A tensor `pretrained` lacks must
    be one `may_be_missing(path)` allows; a shape that differs is refused, naming the
    tensor, the source and both shapes. Returns (params, tensors taken, fresh names)."""
    taken, new = 0, []

    def walk(target, have, path):
        nonlocal taken
        out = {}
        for key, value in target.items():
            here = path + (key,)
            if isinstance(value, dict):
                out[key] = walk(value, have.get(key, {}) if isinstance(have, dict) else {}, here)
                continue
            name = "/".join(here)
            if keep_fresh(here) or key not in have:
                if key not in have and not (keep_fresh(here) or may_be_missing(here)):
                    raise UserError(f"{pretrained.source}: no parameter {name} for this model")
                new.append(name)
                out[key] = value
                continue
            if tuple(have[key].shape) != tuple(value.shape):
                raise UserError(f"{pretrained.source}: parameter {name} has shape "
                                f"{tuple(have[key].shape)}, the config expects "
                                f"{tuple(value.shape)}")
            out[key] = np.asarray(have[key], value.dtype)
            taken += 1
        return out

    return walk(fresh, pretrained.params, ()), taken, new
