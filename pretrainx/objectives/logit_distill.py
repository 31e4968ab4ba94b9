"""Logit distillation from a frozen teacher decoder (Hinton et al. 2015, as T5Gemma adapts
a decoder with PrefixLM + KD): the student's loss mixes its cross-entropy on the targets
with T^2 KL(softmax(teacher / T) || softmax(student / T)) at the same positions,

    loss = (1 - distill.alpha) * CE + distill.alpha * T^2 KL    (T = distill.temperature)

The teacher is a causal decoder on the same vocabulary (`distill.teacher`: a pretrainx
workdir or an HF folder), read through interop as any imported model; its parameters sit
beside the student's under "teacher" (the student's under "student"), carry the same
logical axis names and so are sharded by the same rules, and are frozen: no gradient
step, no optimizer state. It reads the row causally (the batch without the student's
`prefix`), so its logits at i are its next-token distribution for the target at i. An
encoder-decoder student (T5Gemma's PrefixLM + KD) gives the teacher each example as one
causal row, the prefix then the targets (`teacher_rows`), and learns, at target j, what
the teacher predicts after the prefix and targets before j.
"""

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn

from pretrainx import registry
from pretrainx.data import packing
from pretrainx.errors import UserError
from pretrainx.models import imported as imported_lib

TEACHER = "distill.teacher"  # the config key, and the teacher's name among the imports


def soft_kl(student, teacher, temperature: float):
    """T^2 KL(softmax(teacher / T) || softmax(student / T)) per position, float32."""
    s = jax.nn.log_softmax(student.astype(jnp.float32) / temperature, axis=-1)
    t = jax.nn.log_softmax(teacher.astype(jnp.float32) / temperature, axis=-1)
    return jnp.sum(jnp.exp(t) * (t - s), axis=-1) * temperature ** 2


def defaults(c) -> None:
    """The distill.* keys a student objective adds (no teacher: plain cross-entropy)."""
    c.distill.teacher = ""
    c.distill.alpha = 0.5  # the KL's share of the loss
    c.distill.temperature = 1.0


def validate(cfg) -> None:
    """distill.*'s values; a config without the keys (an objective switched by
    --config.objective) trains without a teacher."""
    d = cfg.get("distill")
    if d is None:
        return
    if not 0.0 <= d.alpha <= 1.0:
        raise UserError(f"distill.alpha={d.alpha} must be in [0, 1]")
    if d.temperature <= 0:
        raise UserError(f"distill.temperature={d.temperature} must be > 0")


def imports(cfg) -> dict:
    teacher = (cfg.get("distill") or {}).get("teacher")
    return {TEACHER: teacher} if teacher else {}


def teacher_network(cfg, teacher):
    """The teacher's decoder module, refusing one that cannot teach this student: another
    vocabulary, or no causal next-token network."""
    where, t = f"{TEACHER} {teacher.source}", teacher.model
    family = registry.FAMILIES.find(t.family)
    if family is None or family.next_token_network is None or not family.is_causal(t):
        raise UserError(f"{where} is a {t.family} model without a causal next-token "
                        "network; the teacher must be a decoder (GPT-2, Qwen3, Gemma 3)")
    if t.vocab_size != cfg.model.vocab_size:
        raise UserError(f"{where} has model.vocab_size={t.vocab_size}, the student "
                        f"{cfg.model.vocab_size}: teacher and student must share a vocabulary")
    return family.next_token_network(t)


class TeacherStudent(nn.Module):
    """(batch) -> the student's logits and, beside them, the frozen teacher's."""
    student: nn.Module
    teacher: nn.Module

    def __call__(self, batch, deterministic: bool = True):
        out = dict(self.student(batch, deterministic))
        causal = {k: v for k, v in batch.items() if k != "prefix"}
        out["teacher_logits"] = jax.lax.stop_gradient(self.teacher(causal, True)["logits"])
        return out


TEACHER_FEATURES = ("teacher_inputs", "teacher_segment_ids", "teacher_positions")


def teacher_rows(pairs, length: int, targets_length: int) -> dict:
    """What a causal teacher reads of a packed seq2seq row of PrefixLM examples
    [(inputs, targets)] (inputs the prefix and EOS, targets the rest and EOS): each
    example as one segment of `length`, its prefix then its targets but the last, and
    `teacher_index` [targets_length], the teacher's position whose output predicts each
    target (the prefix's last token for the first)."""
    rows = [np.concatenate([np.asarray(i[:-1]), np.asarray(t[:-1])]) for i, t in pairs]
    tokens, segments, positions = packing.pack_feature(rows, length)
    index = np.zeros(targets_length, np.int32)
    start = target = 0
    for (inputs, targets), row in zip(pairs, rows):
        n = min(len(targets), targets_length - target)
        index[target:target + n] = start + len(inputs) - 2 + np.arange(n)
        start, target = start + row.size, target + n
    return {"teacher_inputs": tokens, "teacher_segment_ids": segments,
            "teacher_positions": positions, "teacher_index": index}


class RowsTeacherStudent(nn.Module):
    """(seq2seq batch) -> the student's logits and, at each target, the frozen teacher's
    from reading its example as one causal row (`teacher_rows`)."""
    student: nn.Module
    teacher: nn.Module

    def __call__(self, batch, deterministic: bool = True):
        out = dict(self.student(batch, deterministic))
        row = {"inputs": batch["teacher_inputs"], "segment_ids": batch["teacher_segment_ids"],
               "positions": batch["teacher_positions"]}
        logits = self.teacher(row, True)["logits"]
        at = jax.vmap(lambda rows, index: rows[index])(logits, batch["teacher_index"])
        out["teacher_logits"] = jax.lax.stop_gradient(at)
        return out


class Distilled:
    """Mixed in before a next-token objective whose sums are next_token.token_sums' over
    `loss_weights` (or a seq2seq one's over `decoder_loss_weights`, `teacher_module`
    RowsTeacherStudent): with a teacher, its KL at the same positions joins the loss."""
    weights_key = "loss_weights"
    teacher_module = TeacherStudent

    def __init__(self, cfg, tokenizer, imported=None):
        super().__init__(cfg, tokenizer)
        self.add_teacher(imported)

    def add_teacher(self, imported) -> None:
        """self.model as the student beside the teacher `imported` names (if it does)."""
        self.teacher = (imported or {}).get(TEACHER)
        if self.teacher is not None:
            self.model = self.teacher_module(self.model, teacher_network(self.cfg,
                                                                         self.teacher))
            self.frozen = (("teacher",),)

    def adopt(self, params: dict, imported: dict) -> dict:
        """A fresh run's parameters: the teacher's own under "teacher"."""
        teacher = imported[TEACHER]
        return dict(params, teacher=imported_lib.fit(params["teacher"], teacher.params,
                                                     f"{TEACHER} {teacher.source}"))

    def describe(self, phase) -> dict:
        out = super().describe(phase)
        if self.teacher is not None:
            d = self.cfg.distill
            out.update(teacher=self.teacher.source, distill_alpha=d.alpha,
                       distill_temperature=d.temperature)
        return out

    def loss_sums(self, outputs, batch) -> dict:
        sums = super().loss_sums(outputs, batch)
        if "teacher_logits" in outputs:
            kl = soft_kl(outputs["logits"], outputs["teacher_logits"],
                         self.cfg.distill.temperature)
            sums["kl_sum"] = jnp.sum(kl * batch[self.weights_key])
        return sums

    def loss(self, sums, norms):
        ce = super().loss(sums, norms)
        if "kl_sum" not in sums:
            return ce
        alpha = self.cfg.distill.alpha
        return (1.0 - alpha) * ce + alpha * sums["kl_sum"] / norms["tokens"]

    def metrics(self, sums, norms) -> dict:
        out = super().metrics(sums, norms)
        if "kl_sum" in sums:
            out["kl"] = sums["kl_sum"] / norms["tokens"]
            if "loss_sum" in sums:  # a next-token objective's (seq2seq's has its own)
                out["cross_entropy"] = sums["loss_sum"] / norms["tokens"]
        return out

    def eval_metrics(self, totals) -> dict:
        out = super().eval_metrics(totals)
        if "kl_sum" in totals:
            out["kl"] = float(totals["kl_sum"]) / max(float(totals["token_sum"]), 1.0)
        return out


def student_params(params):
    """A run's parameters as the student alone (what export, fine-tuning and generation
    read)."""
    return params["student"] if "student" in params else params
