"""MobileBERT's teacher and student on one batch (Sun et al. 2020, section 3.5).

The student is a MobileBertForPreTraining; the teacher is IB-BERT (this family's model at
the teacher's keys) or a BERT of the student's width (the quickstart's), frozen. Both run
unscanned so that every layer's output and attention probabilities come out through
Flax's "intermediates" collection (the layers sow them). `student_from_teacher` is what
the paper copies before the layer-wise transfer: the embeddings and the MLM head.
"""

import dataclasses
from typing import Callable

import jax
import ml_collections
import numpy as np
from flax import traverse_util

from pretrainx.errors import UserError
from pretrainx.models import transformer_encoder as enc
from pretrainx.families.mobilebert import model as mobilebert

def _unscanned(cfg, dtype=None):
    cfg = ml_collections.ConfigDict(cfg.to_dict())
    cfg.scan_layers, cfg.remat = False, "none"
    if "attention_impl" in cfg:  # BERT's attention forms probabilities on XLA's path only
        cfg.attention_impl = "xla"
    if dtype is not None:
        cfg.dtype = dtype
    return cfg


def _layers(tree, num_layers: int, probs_of) -> dict:
    """{"hidden": [layer 1..L outputs], "probs": [layer 1..L attention probabilities]}."""
    encoder = tree["intermediates"]["bert"]
    layers = [encoder[f"layer_{i}"] for i in range(num_layers)]
    return {"hidden": [layer["hidden"][0] for layer in layers],
            "probs": [probs_of(layer)[0] for layer in layers]}


@dataclasses.dataclass(frozen=True)
class Teacher:
    """What a teacher family gives: its pretraining module, where its layers sow their
    attention probabilities, and whether the student can take all its embeddings."""
    module: Callable  # (model cfg) -> a Flax module with MLM logits
    probs: Callable  # (a layer's intermediates) -> its sown probabilities
    gives_embeddings: bool


TEACHERS = {
    "mobilebert": Teacher(mobilebert.MobileBertForPreTraining, lambda layer: layer["probs"],
                          gives_embeddings=True),
    "bert": Teacher(enc.EncoderForMaskedLM, lambda layer: layer["attention"]["probs"],
                    gives_embeddings=False),
}


class Transfer:
    """init/apply as a Flax module's: {"student": ..., "teacher": ...} parameters; outputs
    the student's MLM and NSP logits, the teacher's MLM logits, and both networks' layer
    outputs and attention probabilities (lists over layers 1..L)."""

    def __init__(self, student_cfg, teacher_cfg, teacher_family: str):
        self.student_cfg = _unscanned(student_cfg)
        self.teacher_cfg = _unscanned(teacher_cfg, dtype=student_cfg.dtype)
        self.kind = TEACHERS[teacher_family]
        self.student = mobilebert.MobileBertForPreTraining(self.student_cfg)
        self.teacher = self.kind.module(self.teacher_cfg)

    def init(self, rngs, batch, deterministic: bool = True):
        if not isinstance(rngs, dict):
            rngs = {"params": rngs}
        s_key, t_key = jax.random.split(rngs["params"])
        return {"params": {"student": self.student.init(s_key, batch, deterministic)["params"],
                           "teacher": self.teacher.init(t_key, batch, True)["params"]}}

    def apply(self, variables, batch, deterministic: bool = True, rngs=None):
        params = variables["params"]
        student, s_inter = self.student.apply({"params": params["student"]}, batch,
                                              deterministic, rngs=rngs,
                                              mutable=["intermediates"])
        teacher, t_inter = self.teacher.apply(
            {"params": jax.lax.stop_gradient(params["teacher"])}, batch, True,
            mutable=["intermediates"])
        s = _layers(s_inter, self.student_cfg.num_layers, TEACHERS["mobilebert"].probs)
        t = jax.lax.stop_gradient(_layers(t_inter, self.teacher_cfg.num_layers,
                                          self.kind.probs))
        return {"mlm_logits": student["mlm_logits"], "nsp_logits": student["nsp_logits"],
                "teacher_mlm_logits": jax.lax.stop_gradient(teacher["mlm_logits"]),
                "student_hidden": s["hidden"], "teacher_hidden": t["hidden"],
                "student_probs": s["probs"], "teacher_probs": t["probs"]}


def check_teacher(student_cfg, teacher, transfer_layers: list) -> None:
    """The teacher's layers compare one to one with the student's: its family, width,
    heads, vocabulary and positions, and the layers the map names."""
    m, t, where = student_cfg, teacher.model, teacher.source
    if teacher.family not in TEACHERS:
        raise UserError(f"distill.teacher {where} is a {teacher.family} model; MobileBERT "
                        f"distils from {' or '.join(TEACHERS)} (IB-BERT or a BERT of "
                        "the student's width)")
    if "mlm_bias" not in teacher.params:
        raise UserError(f"distill.teacher {where} has no masked-LM head ({teacher.head}); "
                        "pretraining distillation reads the teacher's MLM predictions")
    for key in ("hidden_size", "num_heads", "vocab_size", "max_position_embeddings",
                "type_vocab_size"):
        if m.get(key) != t.get(key):
            raise UserError(f"distill.teacher {where} has model.{key}={t.get(key)}, the "
                            f"student {m.get(key)}: the feature maps and attention maps are "
                            "compared one to one, so these must be the same")
    for student_layer, teacher_layer in enumerate(transfer_layers, start=1):
        if not 1 <= teacher_layer <= t.num_layers:
            raise UserError(f"distill.transfer_layers maps student layer {student_layer} to "
                            f"teacher layer {teacher_layer}; the teacher has layers "
                            f"1..{t.num_layers}")


def transfer_layers(text: str, student_layers: int, teacher_layers: int) -> list:
    """The teacher layer (1-based) each student layer learns from: "" for the same
    index (then the depths must agree), else one number per student layer."""
    if not str(text).strip():
        if student_layers != teacher_layers:
            raise UserError(f"the student has {student_layers} layers, the teacher "
                            f"{teacher_layers}: set distill.transfer_layers, one teacher "
                            "layer per student layer (e.g. 2,4,6)")
        return list(range(1, student_layers + 1))
    try:
        out = [int(x) for x in str(text).split(",")]
    except ValueError:
        raise UserError(f"distill.transfer_layers={text!r} is not a comma-separated list of "
                        "teacher layers") from None
    if len(out) != student_layers:
        raise UserError(f"distill.transfer_layers={text!r} names {len(out)} teacher layers "
                        f"for {student_layers} student layers")
    return out


def student_from_teacher(fresh: dict, teacher) -> tuple:
    """(student parameters, names copied): what the paper copies from the teacher before
    the layer-wise transfer, the embeddings and the MLM head. From IB-BERT every such
    tensor of the same shape; from a BERT the position and type tables, its word table
    split into the student's E-wide table and the decoder's extension (so the student's
    decoder is the teacher's), and the head's transform, norm and bias. What is not
    copied (a BERT's LayerNorm is no NoNorm; its embeddings have no 3-gram projection)
    stays fresh and trains in the first stage."""
    out = traverse_util.flatten_dict(jax.tree_util.tree_map(np.asarray, fresh))
    given, copied = traverse_util.flatten_dict(teacher.params), []

    def take(path, value):
        if path in out and out[path].shape == np.shape(value):
            out[path] = np.asarray(value, out[path].dtype)
            copied.append("/".join(path))

    head = ("mlm_transform", "mlm_norm", "mlm_bias", "mlm_extra")
    if TEACHERS[teacher.family].gives_embeddings:  # IB-BERT: the same layout
        embeddings = ("token_embed", "embedding_transformation", "position_embed",
                      "type_embed", "embed_norm")
        for path, value in given.items():
            if (path[0] == "bert" and path[1] in embeddings) or path[0] in head:
                take(path, value)
        return traverse_util.unflatten_dict(out), copied
    for name in ("position_embed", "type_embed"):
        take(("bert", name, "embedding"), given[("bert", name, "embedding")])
    words = np.asarray(given[("bert", "token_embed", "embedding")])  # [vocab, hidden]
    width = out[("bert", "token_embed", "embedding")].shape[1]
    take(("bert", "token_embed", "embedding"), words[:, :width])
    take(("mlm_extra",), words[:, width:].T)
    for path, value in given.items():
        if path[0] in head:
            take(path, value)
    return traverse_util.unflatten_dict(out), copied
