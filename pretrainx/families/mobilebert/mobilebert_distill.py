"""MobileBERT's distillation (Sun et al. 2020, section 3.5; the released TF Model Garden
`progressive_distillation`): one objective, one stage at a time (`distill.stage`).

Stage k = 1..L, progressive knowledge transfer of student layer k from teacher layer
t(k) (distill.transfer_layers), per real token and divided by k as the released code:
    100  x mean over features of (LN(teacher) - LN(student))^2     (parameter-free LN)
  + 5000 x (mean of student features - mean of teacher's)^2
  + 5    x |variance of student features - teacher's|
  + 1    x attention transfer, -sum_keys p_teacher log p_student, mean over heads
Everything but student layer k stays where it is (the paper freezes the layers below;
layers above take no gradient), but the embeddings train with layer 1 where the teacher
could not give them all (a BERT teacher has no 3-gram projection and no NoNorm).

Stage 0, pretraining distillation: the student's MLM cross-entropy against
0.5 x the one-hot label + 0.5 x the teacher's softmax (distill.ground_truth_ratio),
plus NSP, on MobileBERT's pairs.

Each stage is its own run with a fresh optimizer (the released code builds one a stage):
family spec's `stages` chains them, WORKDIR/transfer_K for stage K, WORKDIR for the last.
"""

import jax
import jax.numpy as jnp

from pretrainx.families.mobilebert import mobilebert_mlm_nsp, transfer
from pretrainx.families.mobilebert import model as mobilebert
from pretrainx.models import imported as imported_lib
from pretrainx.objectives import assembled, mlm

TEACHER = "distill.teacher"
FEATURE_NORM_EPS = 1e-3  # Keras LayerNormalization's default, as the released code's
_EMBEDDINGS = ("token_embed", "embedding_transformation", "position_embed", "type_embed",
               "embed_norm")
_HEADS = ("mlm_transform", "mlm_norm", "mlm_extra", "mlm_bias", "nsp", "pooler")


def _normalized(x):
    x = x.astype(jnp.float32)
    mean = x.mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(x.var(-1, keepdims=True) + FEATURE_NORM_EPS)


def feature_terms(student, teacher):
    """[batch, length] each: the feature-map MSE of normalized states, the squared gap of
    the means and the absolute gap of the variances over features."""
    s, t = student.astype(jnp.float32), teacher.astype(jnp.float32)
    mse = jnp.mean(jnp.square(_normalized(t) - _normalized(s)), axis=-1)
    return mse, jnp.square(s.mean(-1) - t.mean(-1)), jnp.abs(s.var(-1) - t.var(-1))


def attention_transfer(student_probs, teacher_probs):
    """[batch, length]: -sum over keys of p_teacher log p_student, averaged over heads
    (masked keys carry p_teacher = 0 and add nothing)."""
    t = teacher_probs.astype(jnp.float32)
    log_s = jnp.log(jnp.maximum(student_probs.astype(jnp.float32), 1e-30))
    return jnp.mean(-jnp.sum(t * log_s, axis=-1), axis=1)


def soft_cross_entropy(student_logits, teacher_logits):
    """[batch, pred]: -sum_v softmax(teacher) log softmax(student), float32."""
    t = jax.nn.softmax(teacher_logits.astype(jnp.float32), axis=-1)
    return -jnp.sum(t * jax.nn.log_softmax(student_logits.astype(jnp.float32), axis=-1), -1)


def frozen_paths(cfg, copied_embeddings: bool) -> tuple:
    """What a stage leaves where it is: the teacher always; in layer stage k everything
    of the student but layer k (the layers below with distill.freeze_lower_layers, the
    embeddings from stage 2, or in stage 1 where the teacher gave them all)."""
    stage, d = cfg.distill.stage, cfg.distill
    out = [("teacher",)]
    if stage == 0:
        return tuple(out)
    out += [("student", name) for name in _HEADS]
    if d.freeze_lower_layers and (stage > 1 or copied_embeddings):
        out += [("student", "bert", name) for name in _EMBEDDINGS]
    for i in range(cfg.model.num_layers):
        below = i < stage - 1
        if i >= stage or (below and d.freeze_lower_layers):
            out.append(("student", "bert", f"layer_{i}"))
    return tuple(out)


class MobileBertDistill(assembled.Assembled):
    """MobileBERT's pairs and masks; the model is student + teacher, the loss the stage's."""

    flops_formula = (f"{mobilebert_mlm_nsp.FLOPS} + T, the student trained and T the "
                     f"teacher's forward pass a token (0 without one), "
                     f"{mobilebert_mlm_nsp.FLOPS_SYMBOLS}")

    def __init__(self, cfg, tokenizer, imported=None):
        super().__init__(cfg, tokenizer, mobilebert.MobileBertForPreTraining(cfg.model),
                         **mobilebert_mlm_nsp.parts(cfg, tokenizer))
        self.teacher = (imported or {}).get(TEACHER)
        self.stage = cfg.distill.stage
        self.copied = []
        if self.teacher is None:  # --describe, --stats, the planner: the student alone
            self.frozen = ()
            return
        self.layer_map = transfer.transfer_layers(
            cfg.distill.transfer_layers, cfg.model.num_layers, self.teacher.model.num_layers)
        transfer.check_teacher(cfg.model, self.teacher, self.layer_map)
        self.model = transfer.Transfer(cfg.model, self.teacher.model, self.teacher.family)
        self.frozen = frozen_paths(cfg, transfer.TEACHERS[self.teacher.family].gives_embeddings)

    def adopt(self, params: dict, imported: dict) -> dict:
        """A fresh run: the teacher's parameters, and (distill.copy_from_teacher) the
        student's embeddings and MLM head copied from it."""
        teacher = imported[TEACHER]
        out = dict(params)
        out["teacher"] = imported_lib.fit(params["teacher"], teacher.params,
                                          f"{TEACHER} {teacher.source}")
        if self.cfg.distill.copy_from_teacher:
            out["student"], self.copied = transfer.student_from_teacher(params["student"],
                                                                        teacher)
        return out

    # ---- loss -------------------------------------------------------------
    def loss_sums(self, outputs, batch) -> dict:
        if self.stage == 0:
            return self._distillation_sums(outputs, batch)
        real = (batch["attention_mask"] > 0).astype(jnp.float32)
        k, t = self.stage, self.layer_map[self.stage - 1]
        mse, beta, gamma = feature_terms(outputs["student_hidden"][k - 1],
                                         outputs["teacher_hidden"][t - 1])
        att = attention_transfer(outputs["student_probs"][k - 1],
                                 outputs["teacher_probs"][t - 1])
        return {"feature_sum": jnp.sum(mse * real), "beta_sum": jnp.sum(beta * real),
                "gamma_sum": jnp.sum(gamma * real), "attention_sum": jnp.sum(att * real),
                "token_sum": jnp.sum(real)}

    def _distillation_sums(self, outputs, batch) -> dict:
        sums = self.losses.loss_sums(outputs, batch)
        weights = batch["masked_lm_weights"].astype(jnp.float32)
        soft = soft_cross_entropy(outputs["mlm_logits"], outputs["teacher_mlm_logits"])
        teacher = mlm.mlm_loss_and_metrics(outputs["teacher_mlm_logits"],
                                           batch["masked_lm_ids"], weights)
        sums.update(soft_ce_sum=jnp.sum(soft * weights),
                    teacher_mlm_correct_sum=teacher["mlm_correct_sum"])
        return sums

    def normalizers(self, batch) -> dict:
        if self.stage == 0:
            return self.losses.normalizers(batch)
        return {"tokens": jnp.maximum(jnp.sum(batch["attention_mask"] > 0), 1.0)}

    def _terms(self, sums, norms) -> dict:
        d = self.cfg.distill
        if self.stage == 0:
            return {"soft_ce": sums["soft_ce_sum"] / norms["mlm"]}
        n = norms["tokens"]
        return {"feature_mse": d.hidden_factor * sums["feature_sum"] / n,
                "beta": d.beta_factor * sums["beta_sum"] / n,
                "gamma": d.gamma_factor * sums["gamma_sum"] / n,
                "attention": d.attention_factor * sums["attention_sum"] / n}

    def loss(self, sums, norms):
        terms = self._terms(sums, norms)
        if self.stage:
            return sum(terms.values()) / self.stage
        r = self.cfg.distill.ground_truth_ratio
        return (r * sums["mlm_loss_sum"] / norms["mlm"] + (1 - r) * terms["soft_ce"]
                + sums["nsp_loss_sum"] / norms["nsp"])

    def metrics(self, sums, norms) -> dict:
        out = self._terms(sums, norms)
        if self.stage == 0:
            out.update(self.losses.metrics(sums, norms),
                       teacher_mlm_accuracy=sums["teacher_mlm_correct_sum"] / norms["mlm"])
        return out

    def eval_metrics(self, totals) -> dict:
        host = {k: float(v) for k, v in totals.items()}
        if self.stage == 0:
            out = self.losses.eval_metrics(totals)
            n = max(host["mlm_weight_sum"], 1.0)
            norms = {"mlm": n, "nsp": max(host["nsp_count"], 1.0)}
            return {**out, "hard_loss": out["loss"], "loss": float(self.loss(host, norms)),
                    "soft_ce": host["soft_ce_sum"] / n,
                    "teacher_mlm_accuracy": host["teacher_mlm_correct_sum"] / n}
        norms = {"tokens": max(host["token_sum"], 1.0)}
        return {"loss": float(self.loss(host, norms)),
                **{k: float(v) for k, v in self._terms(host, norms).items()}}

    def describe(self, phase) -> dict:
        out = {**self.data.describe(phase), "stage": self.stage}
        if self.teacher is not None:
            out["teacher"] = self.teacher.source
        return out

    def flops_symbols(self, phase) -> dict:
        return {**mobilebert_mlm_nsp.flops_symbols(self.cfg.model),
                "T": self._teacher_flops(phase)}

    def _teacher_flops(self, phase) -> float:
        if self.teacher is None:
            return 0.0
        t = self.teacher.model
        if "intra_size" in t:  # IB-BERT: MobileBERT's count, forward only
            return mobilebert.flops_per_token(t, phase.seq_len, phase.max_predictions) / 3
        h = t.hidden_size
        return t.num_layers * (2 * (4 * h * h + 2 * h * t.mlp_dim) + 4 * phase.seq_len * h)

    def flops_per_token(self, phase) -> float:
        return (mobilebert.flops_per_token(self.cfg.model, phase.seq_len, phase.max_predictions)
                + self._teacher_flops(phase))
