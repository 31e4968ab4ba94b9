"""DistilBERT's objective (Sanh et al. 2019), with TinyBERT's layer distillation
(Jiao et al. 2020) as an option.

A frozen teacher (`distill.teacher`: a BERT or RoBERTa workdir or HF directory with
its MLM head) and the student read the same rows: RoBERTa's FULL-SENTENCES rows with
a fresh mask each time a row is seen (objectives/rows.py, mlm.py). The loss is

  alpha_ce  x T^2 KL(softmax(teacher / T) || softmax(student / T))   (T = 2)
+ alpha_mlm x the student's MLM cross-entropy
+ alpha_cos x (1 - cos(student, teacher last hidden states))
+ alpha_att x sum over mapped layers of the attention probabilities' squared
              error (summed over keys, averaged over heads and real queries)
+ alpha_hidden x sum over mapped layers of the hidden states' mean squared error
              (the student's through TinyBERT's learned W_e / W_h when the widths
              differ)

with the paper's 5.0 / 2.0 / 1.0 and TinyBERT's terms off (0). The soft-target term
is taken at the masked positions by default: over every position it needs the
teacher's and the student's [rows, length, vocab] float32 logits, 2 x 512 x 30,522 x 4
bytes = 125 MB a row (32 GB for 256 rows), which HF's distillation script pays;
`distill.soft_targets = "all"` does the same. The student starts from the teacher:
its embeddings, every other layer (0, 2, 4, ...) and its MLM head (DistilBERT's
initialisation; `distill.init_from_teacher`), its position table frozen.
"""

import jax
import jax.numpy as jnp

from pretrainx import models
from pretrainx.data import bpe, corpus
from pretrainx.errors import UserError
from pretrainx.models import transformer_encoder as enc
from pretrainx.families.distilbert import model as distilbert
from pretrainx.models import imported as imported_lib
from pretrainx.objectives import assembled, encoder, mlm, rows
from pretrainx.objectives.logit_distill import soft_kl

TEACHER = "distill.teacher"  # the config key, and the teacher's name among the imports


def parse_layer_map(text: str) -> list:
    """"1:2,2:4" -> [(1, 2), (2, 4)]: student layer <- teacher layer (0: embeddings)."""
    pairs = []
    for item in filter(None, (s.strip() for s in str(text).split(","))):
        try:
            student, teacher = (int(x) for x in item.split(":"))
        except ValueError:
            raise UserError(f"distill.layer_map item {item!r} is not STUDENT:TEACHER "
                            "(layer numbers, 0 for the embeddings)") from None
        pairs.append((student, teacher))
    return pairs


def check_teacher(cfg, teacher) -> None:
    """The teacher fits the student: same vocabulary and positions, an MLM head,
    layers the map names, widths that match or a projection."""
    m, t, where = cfg.model, teacher.model, teacher.source
    if teacher.head not in ("pretrain", "mlm") or "mlm_bias" not in teacher.params:
        raise UserError(f"distill.teacher {where} has no masked-LM head ({teacher.head}); "
                        "distillation needs the teacher's MLM predictions")
    for key in ("vocab_size", "max_position_embeddings", "position_offset"):
        if m.get(key, 0) != t.get(key, 0):
            raise UserError(f"distill.teacher {where} has model.{key}={t.get(key, 0)}, the "
                            f"student {m.get(key, 0)}: teacher and student vocabularies and "
                            "positions must be the same")
    if t.get("share_layers") or m.get("share_layers") or enc.factorised(t) or enc.factorised(m):
        raise UserError(f"distill.teacher {where}: distillation reads each layer of a BERT "
                        "or RoBERTa; shared layers or factorised embeddings (ALBERT) are not "
                        "supported")
    d = cfg.distill
    for student, teacher_layer in parse_layer_map(d.layer_map):
        if not 0 <= student <= m.num_layers or not 0 <= teacher_layer <= t.num_layers:
            raise UserError(f"distill.layer_map {student}:{teacher_layer} names a layer that "
                            f"does not exist (student layers 0..{m.num_layers}, teacher "
                            f"0..{t.num_layers}; 0 is the embeddings)")
        if (student == 0) != (teacher_layer == 0):
            raise UserError(f"distill.layer_map {student}:{teacher_layer} maps embeddings to "
                            "a layer")
    if m.hidden_size != t.hidden_size and not d.project_hidden and (
            d.alpha_cos or (d.alpha_hidden and d.layer_map)):
        raise UserError(f"distill.teacher {where} is {t.hidden_size} wide, the student "
                        f"{m.hidden_size}: set distill.project_hidden=True (TinyBERT's learned "
                        "W_h) or alpha_cos=0 and alpha_hidden=0")
    if d.alpha_att and d.layer_map and m.num_heads != t.num_heads:
        raise UserError(f"distill.alpha_att compares attention heads one to one: the teacher "
                        f"has {t.num_heads}, the student {m.num_heads}")
    if d.init_from_teacher and (m.hidden_size, m.num_heads, m.mlp_dim) != (
            t.hidden_size, t.num_heads, t.mlp_dim):
        raise UserError("distill.init_from_teacher copies the teacher's layers: the student's "
                        "hidden_size, num_heads and mlp_dim must be the teacher's")
    if d.init_from_teacher and m.hidden_act != t.hidden_act:
        raise UserError(f"distill.init_from_teacher copies the teacher's layers: set "
                        f"model.hidden_act={t.hidden_act!r} (the teacher's), not "
                        f"{m.hidden_act!r}")
    if d.init_from_teacher and 2 * (m.num_layers - 1) >= t.num_layers:
        raise UserError(f"distill.init_from_teacher takes one teacher layer in two: "
                        f"{m.num_layers} student layers need at least {2 * m.num_layers - 1}")


class DistilMlm(assembled.Assembled):
    """FULL-SENTENCES rows (rows.py) and the distillation loss, its own."""

    flops_formula = ("3 * (L * (2*(4*h^2 + 2*h*mlp) + 4*seq*h) + P_soft*2*(h^2 + h*V)/seq) "
                     "+ L_t * (2*(4*h_t^2 + 2*h_t*mlp_t) + 4*seq*h_t) + P_soft*2*(h_t^2 + h_t*V)/seq"
                     ", the student trained and the teacher's forward pass (L_t, h_t, mlp_t; 0 "
                     "without a teacher), P_soft = seq with soft_targets=all, else P")

    def __init__(self, cfg, tokenizer, imported=None):
        self.teacher = (imported or {}).get(TEACHER)
        self.layer_map = parse_layer_map(cfg.distill.layer_map)
        self.all_positions = cfg.distill.soft_targets == "all"
        if self.teacher is None:  # --describe, --stats, the planner: the student alone
            model = enc.EncoderForMaskedLM(cfg.model)
        else:
            check_teacher(cfg, self.teacher)
            project = cfg.model.hidden_size != self.teacher.model.hidden_size
            model = distilbert.Distillation(cfg.model, self.teacher.model, project,
                                            self.all_positions,
                                            read_probs=cfg.distill.alpha_att > 0)
        # In the parameters, never in the optimizer: the teacher, and the student's
        # position table where DistilBERT freezes it.
        self.frozen = (("teacher",),) + ((("student", "bert", "position_embed"),)
                                         if cfg.distill.freeze_positions else ())
        if tokenizer is not None:
            layout = models.family(cfg.model.family).tokenizer_layout
            tokenizer = bpe.LAYOUTS[layout](tokenizer) if layout else tokenizer
            encoder.require_mask(tokenizer, "mask")
            encoder.require_vocab_fits(tokenizer, cfg)
        super().__init__(cfg, tokenizer, model, corpus.Corpus(cfg, tokenizer),
                         data=rows.FullSentencesRows(cfg, tokenizer))

    def adopt(self, params: dict, imported: dict) -> dict:
        """A fresh run's parameters: the teacher's in "teacher", and the student from
        one teacher layer in two when distill.init_from_teacher."""
        teacher = imported[TEACHER]
        out = dict(params)
        out["teacher"] = imported_lib.fit(params["teacher"], teacher.params, f"distill.teacher {teacher.source}")
        if self.cfg.distill.init_from_teacher:
            start = distilbert.student_from_teacher(teacher.params, self.cfg.model.num_layers)
            out["student"] = imported_lib.fit(params["student"], start, f"distill.teacher {teacher.source}")
        return out

    def describe(self, phase) -> dict:
        shapes = jax.eval_shape(lambda: enc.EncoderForMaskedLM(self.cfg.model).init(
            jax.random.key(0), self.example_batch(1, phase)))["params"]
        size = lambda tree: int(sum(x.size for x in jax.tree_util.tree_leaves(tree)))
        out = {"max_predictions_per_seq": phase.max_predictions,
               "student_params": size(shapes), "student_encoder_params": size(shapes["bert"])}
        if self.teacher is not None:
            out["teacher"] = self.teacher.source
        return out

    # ---- loss -------------------------------------------------------------
    def loss_sums(self, outputs, batch) -> dict:
        if "student_logits" not in outputs:
            raise UserError("distillation needs its teacher: train through pretrainx.main or "
                            "pretrainx.pretrain.train, which read distill.teacher")
        d = self.cfg.distill
        positions, weights = batch["masked_lm_positions"], batch["masked_lm_weights"]
        real = (batch["attention_mask"] > 0).astype(jnp.float32)
        student, teacher = outputs["student_logits"], outputs["teacher_logits"]
        if self.all_positions:  # [batch, length, vocab]: the MLM terms read the masked rows
            pick = lambda x: jnp.take_along_axis(x, positions[..., None], axis=1)
            soft_weights = real
            s_masked, t_masked = pick(student), pick(teacher)
        else:
            soft_weights, s_masked, t_masked = weights, student, teacher
        sums = mlm.mlm_loss_and_metrics(s_masked, batch["masked_lm_ids"], weights)
        t_sums = mlm.mlm_loss_and_metrics(t_masked, batch["masked_lm_ids"], weights)
        sums.update(teacher_mlm_correct_sum=t_sums["mlm_correct_sum"],
                    teacher_mlm_loss_sum=t_sums["mlm_loss_sum"])
        sums["soft_weight_sum"] = jnp.sum(soft_weights)
        sums["kl_sum"] = jnp.sum(soft_kl(student, teacher, d.temperature) * soft_weights)
        s_h, t_h = outputs["student_hidden"], outputs["teacher_hidden"]
        sums["cos_sum"] = jnp.sum((1.0 - cosine(s_h[-1], t_h[-1])) * real)
        att = hidden = jnp.zeros((), jnp.float32)
        for student_layer, teacher_layer in self.layer_map:
            hidden += jnp.sum(jnp.mean(jnp.square(
                s_h[student_layer].astype(jnp.float32)
                - t_h[teacher_layer].astype(jnp.float32)), axis=-1) * real)
            if student_layer:
                att += attention_error(outputs["student_probs"][student_layer - 1],
                                       outputs["teacher_probs"][teacher_layer - 1], real)
        sums.update(att_sum=att, hidden_sum=hidden, token_sum=jnp.sum(real))
        return sums

    def normalizers(self, batch) -> dict:
        real = jnp.maximum(jnp.sum(batch["attention_mask"] > 0), 1.0)
        soft = real if self.all_positions else encoder.mlm_normalizer(batch)
        return {"mlm": encoder.mlm_normalizer(batch), "soft": soft, "tokens": real}

    def _terms(self, sums, norms) -> dict:
        return {"kl": sums["kl_sum"] / norms["soft"], "mlm_loss": sums["mlm_loss_sum"] / norms["mlm"],
                "cos": sums["cos_sum"] / norms["tokens"],
                "att_mse": sums["att_sum"] / norms["tokens"],
                "hidden_mse": sums["hidden_sum"] / norms["tokens"]}

    def loss(self, sums, norms):
        d, t = self.cfg.distill, self._terms(sums, norms)
        return (d.alpha_ce * t["kl"] + d.alpha_mlm * t["mlm_loss"] + d.alpha_cos * t["cos"]
                + d.alpha_att * t["att_mse"] + d.alpha_hidden * t["hidden_mse"])

    def metrics(self, sums, norms) -> dict:
        return {**self._terms(sums, norms),
                "mlm_accuracy": sums["mlm_correct_sum"] / norms["mlm"],
                "teacher_mlm_accuracy": sums["teacher_mlm_correct_sum"] / norms["mlm"]}

    def eval_metrics(self, totals) -> dict:
        n = max(float(totals["mlm_weight_sum"]), 1.0)
        norms = {"mlm": n, "soft": max(float(totals["soft_weight_sum"]), 1.0),
                 "tokens": max(float(totals["token_sum"]), 1.0)}
        host = {k: float(v) for k, v in totals.items()}
        out = {k: float(v) for k, v in self.metrics(host, norms).items()}
        return {"loss": float(self.loss(host, norms)), **out,
                "teacher_mlm_loss": host["teacher_mlm_loss_sum"] / n}

    def flops_symbols(self, phase) -> dict:
        t = self.teacher.model if self.teacher is not None else None
        return {"P_soft": phase.seq_len if self.all_positions else phase.max_predictions,
                "L_t": t.num_layers if t else 0, "h_t": t.hidden_size if t else 0,
                "mlp_t": t.mlp_dim if t else 0}

    def flops_per_token(self, phase) -> float:
        def forward(m):
            h = m.hidden_size
            per_layer = 2 * (4 * h * h + 2 * h * m.mlp_dim) + 2 * 2 * phase.seq_len * h
            predicted = phase.seq_len if self.all_positions else phase.max_predictions
            return m.num_layers * per_layer + predicted * 2 * (h * h + h * m.vocab_size) / phase.seq_len
        teacher = forward(self.teacher.model) if self.teacher is not None else 0.0
        return 3.0 * forward(self.cfg.model) + teacher


def cosine(a, b):
    a, b = a.astype(jnp.float32), b.astype(jnp.float32)
    dot = jnp.sum(a * b, axis=-1)
    return dot / jnp.maximum(jnp.linalg.norm(a, axis=-1) * jnp.linalg.norm(b, axis=-1), 1e-8)


def attention_error(student, teacher, real):
    """Squared error of [batch, heads, q, k] probabilities summed over keys, averaged
    over heads, summed over real queries."""
    diff = jnp.square(student.astype(jnp.float32) - teacher.astype(jnp.float32)).sum(-1)
    return jnp.sum(diff.mean(axis=1) * real)
