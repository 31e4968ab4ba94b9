"""google-research/bert TensorFlow checkpoints (bert_model.ckpt + bert_config.json +
vocab.txt, as the released BERT models ship) -> our BERT.

The variable names are translated to HuggingFace's (`bert/encoder/layer_3/...` ->
`bert.encoder.layer.3....`; TF kernels are [in, out] and are transposed to torch's
[out, in], `cls/seq_relationship/output_weights` already is), then read as an HF
state dict. Adam slots and `global_step` are skipped. Reading the checkpoint needs
TensorFlow (`pip install pretrainx[tf]`); nothing else does.
"""

import json
import os
import re

import pretrainx.families.bert.hf as hf_bert
from pretrainx import interop
from pretrainx.errors import UserError
from pretrainx.interop.pretrained import Pretrained
from pretrainx.families.bert import model as bert

CHECKPOINT = "bert_model.ckpt"
_SKIP = re.compile(r"(adam_[mv]|global_step|bad_steps|loss_scale|good_steps)")


def hf_name(tf_name: str):
    """(HF name, transpose) of a TF variable, or None for optimizer state."""
    if _SKIP.search(tf_name):
        return None
    name = tf_name
    name = re.sub(r"layer_(\d+)", r"layer.\1", name)
    name = name.replace("/", ".")
    name = name.replace("LayerNorm.gamma", "LayerNorm.weight").replace(
        "LayerNorm.beta", "LayerNorm.bias")
    if name.startswith("bert.embeddings.") and not name.endswith(("weight", "bias")):
        return name + ".weight", False  # word/position/token_type embeddings
    if name == "cls.predictions.output_bias":
        return "cls.predictions.bias", False
    if name == "cls.seq_relationship.output_weights":
        return "cls.seq_relationship.weight", False
    if name == "cls.seq_relationship.output_bias":
        return "cls.seq_relationship.bias", False
    if name.endswith(".kernel"):
        return name[:-len(".kernel")] + ".weight", True
    return name, False


def hf_state(variables: dict) -> dict:
    """{TF name: array} -> {HF name: array}."""
    out = {}
    for tf_name, value in variables.items():
        mapped = hf_name(tf_name)
        if mapped is not None:
            name, transpose = mapped
            out[name] = value.T if transpose else value
    return out


def read_variables(prefix: str) -> dict:
    try:
        import tensorflow as tf
    except ImportError:
        raise UserError(f"{prefix} is a TensorFlow checkpoint; reading it needs TensorFlow "
                        "(pip install 'pretrainx[tf]')") from None
    try:
        names = [name for name, _ in tf.train.list_variables(prefix)]
        return {name: tf.train.load_variable(prefix, name) for name in names
                if hf_name(name) is not None}
    except Exception as e:  # a truncated or foreign checkpoint
        raise UserError(f"cannot read TensorFlow checkpoint {prefix}: "
                        f"{str(e).splitlines()[0]}") from None


def model_config(path: str, base):
    """Our model keys from bert_config.json. Its "gelu" is the tanh approximation
    (google-research/bert's modeling.gelu), unlike HF's config.json "gelu"."""
    config_file = os.path.join(path, "bert_config.json")
    try:
        with open(config_file, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read {config_file}: {e}") from None
    if cfg.get("hidden_act", "gelu") == "gelu":  # the file's, not ours
        cfg = dict(cfg, hidden_act="gelu_new")
    return hf_bert.model_config_from_hf(cfg, base, config_file)


def load(path: str):
    model = model_config(path, bert.default_config())
    prefix = os.path.join(path, CHECKPOINT)
    state = hf_state(read_variables(prefix))
    head = "pretrain" if "cls.predictions.bias" in state else "encoder"
    try:
        params = hf_bert.from_hf_state(state, model, head, prefix)
    except ValueError as e:
        raise UserError(f"{prefix}: weights do not fit bert_config.json ({e})") from None
    vocab = os.path.join(path, "vocab.txt")
    if not os.path.isfile(vocab):
        raise UserError(f"no vocab.txt beside {prefix}")
    # Google names its releases uncased_L-12_H-768_A-12, cased_L-12_H-768_A-12, ...
    name = os.path.basename(os.path.normpath(path)).lower()
    lower_case = not ("cased" in name and "uncased" not in name)
    return Pretrained(model=model, params=params, tokenizer=vocab, lower_case=lower_case,
                      head=head, source=prefix)


FORMAT = interop.Format(
    name="google-research BERT checkpoint", marker="bert_config.json", load=load)
