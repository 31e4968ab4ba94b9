"""DistilBERT (Sanh et al. 2019) and the distillation model that trains it.

DistilBERT is BERT's encoder at half the depth with no token-type table (model.
type_vocab_size = 0), no pooler and no NSP head; its MLM head is BERT's (dense, GeLU,
LayerNorm, the tied word table). HF's DistilBertForSequenceClassification puts a dense
+ ReLU on [CLS] where BERT's pooler applies tanh: model.pooler_activation = "relu".

`Distillation` runs a frozen teacher (a BERT or RoBERTa: the shared EncoderForMaskedLM over
the teacher's keys) and the student side by side on the same batch. It is not a Flax
module but has a module's init/apply, so the train step treats it as any model: its
parameters are {"student", "teacher", "projection"}, each initialised by its own
module with logical axis names, so the same sharding rules place the teacher. The
teacher runs under stop_gradient in the compute dtype; the objective keeps it out of
the optimizer (`frozen`). Each network's per-layer hidden states and attention
probabilities come out through Flax's "intermediates" collection (the shared EncoderLayer
and mha.MultiHeadAttention sow them; a run that does not ask pays nothing).
"""

import jax
import jax.numpy as jnp
import ml_collections
from flax import linen as nn

from pretrainx.models import layers
from pretrainx.families.bert import model as bert
from pretrainx.models import transformer_encoder as enc


def default_config() -> ml_collections.ConfigDict:
    """DistilBERT-base (distilbert-base-uncased): 6 layers of BERT-Base's, exact GeLU."""
    return bert.default_config(
        family="distilbert",
        num_layers=6,
        type_vocab_size=0,  # no token-type embeddings
        hidden_act="gelu",
        pooler_activation="relu")  # HF's pre_classifier


class Projections(nn.Module):
    """TinyBERT's learned maps from the student's width to the teacher's: W_e for the
    embedding output, W_h shared by every mapped layer."""
    width: int
    dtype: jnp.dtype

    def setup(self):
        init = layers.truncated_normal(0.02)
        self.embedding = layers.Dense(self.width, (None, "embed"), dtype=self.dtype,
                                      kernel_init=init)
        self.hidden = layers.Dense(self.width, (None, "embed"), dtype=self.dtype,
                                   kernel_init=init)

    def __call__(self, x, is_embedding: bool):
        return self.embedding(x) if is_embedding else self.hidden(x)

    def both(self, x):  # init: create both kernels
        return self.embedding(x), self.hidden(x)


def intermediates(tree, num_layers: int) -> dict:
    """Hidden states [embedding output, layer 1, ..., layer L] and attention
    probabilities [layer 1, ..., layer L] from a BertForMaskedLM's intermediates."""
    encoder = tree["intermediates"]["bert"]
    hidden = [encoder["embedded"][0]] + [encoder[f"layer_{i}"]["hidden"][0]
                                          for i in range(num_layers)]
    # an attention kernel forms no probabilities (then None: alpha_att must be 0)
    probs = [encoder[f"layer_{i}"]["attention"].get("probs", (None,))[0]
             for i in range(num_layers)]
    return {"hidden": hidden, "probs": probs}


class Distillation:
    """Student and teacher on one batch; outputs both networks' logits at the gathered
    positions (`student_logits`, `teacher_logits`) and their hidden states and
    attention probabilities."""

    def __init__(self, student_cfg, teacher_cfg, project: bool, all_positions: bool = False,
                 read_probs: bool = False):
        self.all_positions = all_positions
        student_cfg = ml_collections.ConfigDict(student_cfg.to_dict())
        if read_probs:  # attention probabilities exist only on XLA's path (no kernel)
            student_cfg.attention_impl = "xla"
        self.student_cfg, self.teacher_cfg = student_cfg, teacher_cfg
        self.student = enc.EncoderForMaskedLM(student_cfg)
        teacher = ml_collections.ConfigDict(teacher_cfg.to_dict())
        teacher.dtype = student_cfg.dtype  # the teacher computes in the student's dtype
        teacher.attention_impl = student_cfg.attention_impl
        teacher.scan_layers, teacher.remat = False, "none"
        self.teacher = enc.EncoderForMaskedLM(teacher)
        self.projections = (Projections(teacher.hidden_size, jnp.dtype(student_cfg.dtype))
                            if project else None)

    def init(self, rngs, batch, deterministic: bool = True):
        if not isinstance(rngs, dict):
            rngs = {"params": rngs}
        keys = jax.random.split(rngs["params"], 3)
        params = {"student": self.student.init(keys[0], batch, deterministic)["params"],
                  "teacher": self.teacher.init(keys[1], batch, deterministic)["params"]}
        if self.projections is not None:
            width = self.student_cfg.hidden_size
            params["projection"] = self.projections.init(
                keys[2], jnp.zeros((1, 1, width), jnp.float32), method=Projections.both)["params"]
        return {"params": params}

    def project(self, params, x, is_embedding: bool):
        if self.projections is None:
            return x
        return self.projections.apply({"params": params["projection"]}, x, is_embedding)

    def apply(self, variables, batch, deterministic: bool = True, rngs=None):
        params = variables["params"]
        if self.all_positions:  # the soft targets at every position, not the gathered ones
            length = batch["input_ids"].shape[1]
            batch = dict(batch, masked_lm_positions=jnp.broadcast_to(
                jnp.arange(length, dtype=jnp.int32), batch["input_ids"].shape))
        student, s_inter = self.student.apply(
            {"params": params["student"]}, batch, deterministic, rngs=rngs,
            mutable=["intermediates"])
        teacher, t_inter = self.teacher.apply(
            {"params": jax.lax.stop_gradient(params["teacher"])}, batch, True,
            mutable=["intermediates"])
        t_inter = jax.lax.stop_gradient(t_inter)
        s = intermediates(s_inter, self.student_cfg.num_layers)
        t = intermediates(t_inter, self.teacher_cfg.num_layers)
        s["hidden"] = [self.project(params, x, i == 0) for i, x in enumerate(s["hidden"])]
        return {"student_logits": student["mlm_logits"],
                "teacher_logits": jax.lax.stop_gradient(teacher["mlm_logits"]),
                "student_hidden": s["hidden"], "teacher_hidden": t["hidden"],
                "student_probs": s["probs"], "teacher_probs": t["probs"]}


def student_from_teacher(teacher_params: dict, num_layers: int, every: int = 2) -> dict:
    """DistilBERT's initialisation: the teacher's embeddings (without the token-type
    table), every `every`-th layer from the first (0, 2, 4, ... for half the depth) and
    its MLM head."""
    encoder = teacher_params["bert"]
    out = {"bert": {k: v for k, v in encoder.items()
                    if k in ("token_embed", "position_embed", "embed_norm")}}
    for i in range(num_layers):
        out["bert"][f"layer_{i}"] = encoder[f"layer_{i * every}"]
    out.update({k: teacher_params[k] for k in ("mlm_transform", "mlm_norm", "mlm_bias")})
    return out
