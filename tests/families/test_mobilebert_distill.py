"""MobileBERT's distillation: the stages run in turn, each from the one before; a layer's
stage moves that layer alone (the layers below and the copied embeddings stay); the
student starts with the teacher's decoder; the losses are the released code's; a teacher
that cannot be compared layer to layer is refused in one line."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn

from conftest import load_config, override, read_metrics
from pretrainx import interop, pretrain
from pretrainx.errors import UserError
from pretrainx.families.mobilebert import mobilebert_distill as distill
from pretrainx.families.mobilebert import transfer

# the conftest teacher's width, heads and depth (tiny_bert_config)
STUDENT = {"model.num_layers": 2, "model.hidden_size": 64, "model.num_heads": 4,
           "model.intra_size": 32, "model.mlp_dim": 32, "model.embedding_size": 16,
           "seq_len": 64, "global_batch_size": 8, "data.max_predictions_per_seq": 10,
           "data.dupe_factor": 1, "log_every": 1, "eval_every": 1000, "eval_steps": 2,
           "checkpoint_every": 1000}


def _cfg(teacher, **extra):
    return override(load_config("mobilebert_distill.py", "quickstart"),
                    dict(STUDENT, **{"distill.teacher": teacher, "distill.layer_steps": 3,
                                     "total_steps": 4}, **extra))


def _student(workdir):
    params = interop.load(workdir).params
    return jax.tree_util.tree_map(np.asarray, params)


@pytest.mark.slow
def test_the_stages_run_in_turn_and_each_moves_only_its_layer(pretrained_workdir, tmp_path):
    work = tmp_path / "student"
    one = jax.devices()[:1]  # what each stage moves, not how a mesh splits it
    assert pretrain.train(_cfg(pretrained_workdir), str(work), devices=one)["complete"]
    first, second, last = (_student(str(work / "transfer_1")), _student(str(work / "transfer_2")),
                           _student(str(work)))
    teacher = interop.load(pretrained_workdir).params
    # stage 2 moved layer 2 alone: layer 1, the embeddings and the copied head stayed
    for name in ("layer_0", "token_embed", "embedding_transformation", "embed_norm"):
        jax.tree_util.tree_map(np.testing.assert_array_equal, first["bert"][name],
                               second["bert"][name])
    assert not np.allclose(first["bert"]["layer_1"]["mlp_wi"]["kernel"],
                           second["bert"]["layer_1"]["mlp_wi"]["kernel"])
    np.testing.assert_array_equal(second["mlm_bias"], np.asarray(teacher["mlm_bias"]))
    # stage 1 trained layer 1 and (a BERT teacher gives no 3-gram projection) the
    # embeddings, the tables copied from the teacher among them
    assert not np.allclose(first["bert"]["position_embed"]["embedding"],
                           teacher["bert"]["position_embed"]["embedding"])
    # the last stage (pretraining distillation) trains everything, teacher aside
    assert not np.allclose(second["bert"]["layer_0"]["mlp_wi"]["kernel"],
                           last["bert"]["layer_0"]["mlp_wi"]["kernel"])
    assert not np.allclose(second["mlm_bias"], last["mlm_bias"])
    transfer_loss = [r["loss"] for r in read_metrics(str(work / "transfer_1"))]
    assert transfer_loss[-1] < transfer_loss[0]
    final = read_metrics(str(work))
    assert {"soft_ce", "mlm_accuracy", "nsp_loss", "teacher_mlm_accuracy"} <= set(final[-1])
    # a rerun finds every stage done and trains nothing
    assert pretrain.train(_cfg(pretrained_workdir), str(work), devices=one)["complete"]
    assert len(read_metrics(str(work))) == len(final)


def test_the_student_starts_with_the_teachers_decoder_and_tables(pretrained_workdir):
    teacher = interop.load(pretrained_workdir)
    cfg = _cfg(pretrained_workdir)
    model = transfer.Transfer(cfg.model, teacher.model, teacher.family)
    batch = {k: jnp.zeros((1, 8), jnp.int32) for k in
             ("input_ids", "token_type_ids", "attention_mask")}
    batch["masked_lm_positions"] = jnp.zeros((1, 2), jnp.int32)
    fresh = jax.tree_util.tree_map(
        np.asarray, nn.unbox(jax.jit(model.init)(jax.random.key(0), batch)["params"]["student"]))
    student, copied = transfer.student_from_teacher(fresh, teacher)
    words = np.asarray(teacher.params["bert"]["token_embed"]["embedding"])
    decoder = np.concatenate([student["bert"]["token_embed"]["embedding"],
                              student["mlm_extra"].T], axis=1)
    np.testing.assert_array_equal(decoder, words)  # h @ decoder.T: the teacher's logits
    for name in ("position_embed", "type_embed"):
        np.testing.assert_array_equal(student["bert"][name]["embedding"],
                                      teacher.params["bert"][name]["embedding"])
    assert "mlm_transform/kernel" in copied and "bert/embed_norm/scale" not in copied


def test_an_ib_bert_teacher_gives_every_embedding_and_head_tensor_and_no_layer():
    """IB-BERT (MobileBERT's layout, wider inside the bottleneck): the student takes its
    embeddings (3-gram projection and NoNorm included) and MLM head whole, and keeps
    its own fresh layers."""
    from pretrainx.families.mobilebert import model as mobilebert
    cfg = _cfg("/t")
    wide = cfg.model.copy_and_resolve_references()
    wide.intra_size = 2 * cfg.model.intra_size
    batch = {k: jnp.zeros((1, 8), jnp.int32) for k in
             ("input_ids", "token_type_ids", "attention_mask")}
    batch["masked_lm_positions"] = jnp.zeros((1, 2), jnp.int32)

    def init(model_cfg, seed):
        params = mobilebert.MobileBertForPreTraining(model_cfg).init(jax.random.key(seed), batch)
        return jax.tree_util.tree_map(np.asarray, nn.unbox(params["params"]))

    fresh, given = init(cfg.model, 0), init(wide, 1)
    teacher = types.SimpleNamespace(family="mobilebert", params=given)
    student, copied = transfer.student_from_teacher(fresh, teacher)
    for name in ("token_embed", "embedding_transformation", "position_embed", "type_embed",
                 "embed_norm"):
        jax.tree_util.tree_map(np.testing.assert_array_equal, student["bert"][name],
                               given["bert"][name])
    for name in ("mlm_transform", "mlm_norm", "mlm_bias", "mlm_extra"):
        jax.tree_util.tree_map(np.testing.assert_array_equal, student[name], given[name])
    jax.tree_util.tree_map(np.testing.assert_array_equal, student["bert"]["layer_0"],
                           fresh["bert"]["layer_0"])
    assert "bert/embed_norm/scale" in copied and not any("layer_" in c for c in copied)


def test_the_losses_are_the_released_codes():
    rng = np.random.default_rng(0)
    t = jnp.asarray(rng.normal(size=(2, 5, 8)), jnp.float32)
    mse, beta, gamma = distill.feature_terms(t, t)
    assert float(mse.max()) == float(beta.max()) == float(gamma.max()) == 0.0
    shifted = distill.feature_terms(t + 1.0, t)  # a shift moves the mean term alone
    np.testing.assert_allclose(shifted[0], 0.0, atol=1e-5)
    np.testing.assert_allclose(shifted[1], 1.0, rtol=1e-5)
    np.testing.assert_allclose(shifted[2], 0.0, atol=1e-5)
    scaled = distill.feature_terms(2.0 * t, t)  # a scale: the variance gap, 3 x var(t)
    np.testing.assert_allclose(scaled[2], 3.0 * np.var(np.asarray(t), axis=-1), rtol=1e-4)
    probs = jax.nn.softmax(jnp.asarray(rng.normal(size=(2, 3, 5, 5)), jnp.float32), -1)
    entropy = -jnp.sum(probs * jnp.log(probs), -1).mean(1)  # the minimum over students
    np.testing.assert_allclose(distill.attention_transfer(probs, probs), entropy, rtol=1e-5)
    other = jax.nn.softmax(jnp.asarray(rng.normal(size=(2, 3, 5, 5)), jnp.float32), -1)
    assert bool(jnp.all(distill.attention_transfer(other, probs) >= entropy))
    logits = jnp.asarray(rng.normal(size=(2, 3, 11)), jnp.float32)
    np.testing.assert_allclose(  # against itself: the teacher's entropy
        distill.soft_cross_entropy(logits, logits),
        -jnp.sum(jax.nn.softmax(logits) * jax.nn.log_softmax(logits), -1), rtol=1e-5)


def test_a_layer_stage_freezes_what_the_paper_freezes():
    cfg = override(load_config("mobilebert_distill.py", "quickstart"),
                   {"distill.stage": 2, "model.num_layers": 3})
    frozen = set(distill.frozen_paths(cfg, copied_embeddings=False))
    assert ("student", "bert", "layer_1") not in frozen
    assert {("student", "bert", "layer_0"), ("student", "bert", "layer_2"),
            ("student", "bert", "token_embed"), ("student", "mlm_bias"), ("teacher",)} <= frozen
    first = set(distill.frozen_paths(override(cfg, {"distill.stage": 1}), False))
    assert ("student", "bert", "token_embed") not in first  # a BERT teacher: trained here
    assert ("student", "bert", "token_embed") in set(
        distill.frozen_paths(override(cfg, {"distill.stage": 1}), True))
    assert distill.frozen_paths(override(cfg, {"distill.stage": 0}), True) == (("teacher",),)


@pytest.mark.parametrize("key, value, words", [
    ("hidden_size", 32, "model.hidden_size=32, the student 64"),
    ("num_heads", 2, "model.num_heads=2, the student 4"),
])
def test_a_teacher_that_cannot_be_compared_layer_to_layer_is_refused(key, value, words):
    cfg = _cfg("/t")
    model = dict(cfg.model.to_dict(), **{key: value})
    teacher = types.SimpleNamespace(family="bert", model=model, params={"mlm_bias": 0},
                                    source="/t", head="pretrain")
    with pytest.raises(UserError, match=words):
        transfer.check_teacher(cfg.model, teacher, [1, 2])
    with pytest.raises(UserError, match="names 1 teacher layers for 2 student layers"):
        transfer.transfer_layers("2", 2, 4)
    with pytest.raises(UserError, match="set distill.transfer_layers"):
        transfer.transfer_layers("", 2, 4)
