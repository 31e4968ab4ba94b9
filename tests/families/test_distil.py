"""DistilBERT and layer distillation: the student learns from a frozen teacher.

A tiny BERT teacher is pretrained on real text; students of half its depth are
distilled from it and trained from scratch for the same steps, and evaluated on the
unseen Alice. Also: the teacher stays bit-identical with no optimizer state, the
loss is the paper's sum, sharded == unsharded, HF's DistilBertForMaskedLM parity,
GLUE fine-tuning from a distilled workdir, and the bad input the issue names.
"""

import json

import jax
import numpy as np
import pytest

from conftest import ALICE, REPO, load_config, override, read_metrics
from pretrainx import interop, pretrain
from pretrainx.errors import UserError

SPM = str(REPO / "pretrainx" / "assets" / "spm_4k.model")
BOOKS = REPO / "pretrainx" / "assets" / "text"
TRAIN = ",".join(str(BOOKS / f) for f in ("pg1342_pride_and_prejudice.txt",
                                           "pg1661_adventures_of_sherlock_holmes.txt"))
TEACHER_MODEL = dict(num_layers=2, hidden_size=64, num_heads=2, mlp_dim=256, vocab_size=4096,
                     dtype="float32")


def _teacher_config(steps):
    """The quickstart's recipe at L2/H64 (lr 3e-3), for the tests that need a teacher
    but not one that knows English."""
    c = load_config("quickstart.py")
    c.model.update(**TEACHER_MODEL)
    return override(c, {"total_steps": steps, "checkpoint_every": steps, "eval_every": steps,
                        "log_every": 100, "eval_steps": 4, "data.dupe_factor": 2,
                        "optimizer.learning_rate": 3e-3})


def _student_config(teacher, steps, **overrides):
    """The distil quickstart at the teacher's width: one layer (the teacher's first)."""
    c = load_config("distil_quickstart.py")
    c.model.update(num_layers=1, hidden_size=64, num_heads=2, mlp_dim=256)
    return override(c, {"total_steps": steps, "checkpoint_every": steps, "eval_every": steps,
                        "log_every": 50, "eval_steps": 4, "distill.teacher": teacher,
                        **overrides})


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    """A teacher after 20 steps."""
    workdir = str(tmp_path_factory.mktemp("teacher20") / "w")
    pretrain.train(_teacher_config(20), workdir, devices=jax.devices()[:1])
    return workdir


def _eval(workdir):
    return read_metrics(workdir, "eval")[-1]


# The quickstart's BERT-Tiny stopped at step 900 of its 2,500 (eval MLM accuracy 0.1916 on
# the unseen Alice, off the 0.13 unigram plateau), exported to HF: made by
#   python -m pretrainx.main --config=configs/quickstart.py --workdir=W --config.mesh.data=1
#   (stopped at step 900) && python -m pretrainx.export --workdir=W --output=DIR
# Stored because training it took 5 minutes of the suite; README's quickstart row is
# where the recipe itself is measured (0.2703 after 2,500 steps). The claim it serves
# (a student at 92% of it, far above scratch) is benchmarks/distil_claim.py's.

def _restore_state(workdir):
    import os  # noqa: F401
    import orbax.checkpoint as ocp
    manager = ocp.CheckpointManager(os.path.abspath(os.path.join(workdir, "checkpoints")),
                                    item_names=("state", "data", "config"))
    try:
        return manager.restore(manager.latest_step(), args=ocp.args.Composite(
            state=ocp.args.StandardRestore()))["state"]
    finally:
        manager.close()


def _same(a, b):
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return len(la) == len(lb) and all(np.asarray(x).tobytes() == np.asarray(y).tobytes()
                                      for x, y in zip(la, lb))


@pytest.mark.slow
def test_teacher_is_frozen_without_optimizer_state_and_sharded_equals_unsharded(teacher,
                                                                                tmp_path):
    """The teacher (and the student's frozen position table) are bit-identical after
    training and hold no optimizer state; the student started from teacher layers 0
    and 2 and moved; the losses on 1 device and on a (data, fsdp, tensor) mesh of 8
    agree; the loss is 5 KL + 2 MLM + 1 cos as logged."""
    one, mesh = str(tmp_path / "one"), str(tmp_path / "mesh")
    quiet = {"model.dropout_rate": 0.0, "model.attention_dropout_rate": 0.0, "log_every": 1,
             "global_batch_size": 16}
    pretrain.train(_student_config(teacher, 4, **quiet), one, devices=jax.devices()[:1])
    pretrain.train(_student_config(teacher, 4, **quiet, **{"mesh.data": 2, "mesh.fsdp": 2,
                                                         "mesh.tensor": 2}), mesh)
    resumed = str(tmp_path / "resumed")  # stopped after step 2, then resumed
    pretrain.train(_student_config(teacher, 4, **quiet), resumed, devices=jax.devices()[:1],
                   stop_at=2)
    pretrain.train(_student_config(teacher, 4, **quiet), resumed, devices=jax.devices()[:1])
    a, b = read_metrics(one), read_metrics(mesh)
    np.testing.assert_allclose([r["loss"] for r in a], [r["loss"] for r in b], rtol=0,
                               atol=1e-4)
    assert [r["loss"] for r in read_metrics(resumed)] == [r["loss"] for r in a]
    for r in a:
        assert r["loss"] == pytest.approx(5 * r["kl"] + 2 * r["mlm_loss"] + r["cos"], rel=1e-4)
    state = _restore_state(one)
    source = interop.load(teacher).params
    params = state["params"]
    taught = {k: source[k] for k in ("mlm_transform", "mlm_norm", "mlm_bias")}
    taught["bert"] = {k: v for k, v in source["bert"].items() if k != "pooler"}
    assert _same(params["teacher"], taught)
    assert _same(params["student"]["bert"]["position_embed"],
                 source["bert"]["position_embed"])
    assert not _same(params["student"]["bert"]["layer_0"], source["bert"]["layer_0"])
    # Adam's moments: two arrays for each trained parameter, none for the teacher's.
    trained = sum(x.size for x in jax.tree_util.tree_leaves(params["student"]))
    trained -= source["bert"]["position_embed"]["embedding"].size
    moments = sum(x.size for x in jax.tree_util.tree_leaves(state["opt_state"]) if x.ndim)
    assert moments == 2 * trained
    # The run reads as a DistilBERT (the student alone) and fine-tunes on GLUE.
    student = interop.load(one)
    assert (student.family, student.head) == ("distilbert", "mlm")
    assert _same(student.params, params["student"])
    from pretrainx.finetune import loop as finetune_loop
    from pretrainx.finetune.config import finetune_config
    cfg = finetune_config()
    cfg.update_from_flattened_dict({
        "init_from": one, "task": "sst2", "data.glue_dir": str(REPO.parent / "shared" / "data"
                                                              / "glue"),
        "seq_len": 32, "global_batch_size": 16, "epochs": 1, "data.max_train_examples": 32,
        "data.max_eval_examples": 32})
    if (REPO.parent / "shared" / "data" / "glue").is_dir():
        out = finetune_loop.train(cfg, str(tmp_path / "ft"), devices=jax.devices()[:1])
        assert 0 <= out["best"]["accuracy"] <= 1
        tuned = interop.load(str(tmp_path / "ft"))
        assert (tuned.family, tuned.head) == ("distilbert", "classify")
        assert "type_embed" not in tuned.params["bert"]


@pytest.mark.slow
def test_layer_distillation_with_a_projection_trains(teacher, tmp_path):
    """TinyBERT's terms alone (the others weighted 0): a narrower student (32 wide)
    learns through W_e / W_h, and the attention and hidden errors fall. (Attention
    probabilities differ by little: their squared errors are ~1e-5 a query here, hence
    the weight of 1000.)"""
    cfg = _student_config(teacher, 30, **{
        "model.hidden_size": 32, "model.mlp_dim": 128, "model.num_layers": 2,
        "distill.init_from_teacher": False, "distill.freeze_positions": False, "distill.project_hidden": True,
        "distill.layer_map": "0:0,1:2", "distill.alpha_att": 1000.0,
        "distill.alpha_hidden": 1.0, "distill.alpha_ce": 0.0, "distill.alpha_mlm": 0.0,
        "distill.alpha_cos": 0.0, "log_every": 1, "optimizer.warmup_steps": 2})
    pretrain.train(cfg, str(tmp_path), devices=jax.devices()[:1])
    records = read_metrics(tmp_path)
    att, hidden = [r["att_mse"] for r in records], [r["hidden_mse"] for r in records]
    assert np.mean(att[-5:]) < att[0] and np.mean(hidden[-5:]) < 0.7 * hidden[0], (att, hidden)
    assert "projection" in _restore_state(str(tmp_path))["params"]


@pytest.mark.slow
def test_soft_targets_over_every_position(teacher, tmp_path):
    """distill.soft_targets=all (HF's script): the KL term reads every real token and
    the MLM term still the masked ones; the first step's MLM loss is the masked run's."""
    runs = {}
    for where in ("masked", "all"):
        workdir = str(tmp_path / where)
        pretrain.train(_student_config(teacher, 1, **{"distill.soft_targets": where,
                                                      "log_every": 1}), workdir,
                       devices=jax.devices()[:1])
        runs[where] = read_metrics(workdir)[0]
    assert runs["all"]["mlm_loss"] == pytest.approx(runs["masked"]["mlm_loss"], rel=1e-5)
    assert runs["all"]["kl"] != pytest.approx(runs["masked"]["kl"], rel=1e-3)
    r = runs["all"]
    assert r["loss"] == pytest.approx(5 * r["kl"] + 2 * r["mlm_loss"] + r["cos"], rel=1e-4)


@pytest.mark.slow
def test_bad_distillation_input_is_one_line_and_writes_nothing(teacher, tmp_path):
    cases = [
        ({"model.vocab_size": 4104}, r"model.vocab_size=4096, the student 4104: teacher and "
                                     r"student vocabularies"),
        ({"distill.teacher": str(tmp_path)}, "is neither a pretrainx workdir"),
        ({"distill.layer_map": "1:9"}, r"layer_map 1:9 names a layer that does not exist"),
        ({"model.num_layers": 2}, r"one teacher layer in two: 2 student layers need at least 3"),
        ({"model.hidden_size": 32, "model.mlp_dim": 128, "distill.init_from_teacher": False},
         r"is 64 wide, the student 32: set distill.project_hidden=True"),
        ({"distill.teacher": ""}, "config key 'distill.teacher' is empty"),
    ]
    empty_teacher = tmp_path / "no_checkpoint"
    (empty_teacher / "checkpoints").mkdir(parents=True)
    (empty_teacher / "config.json").write_text(json.dumps({"objective": "bert"}))
    cases.append(({"distill.teacher": str(empty_teacher)}, "holds no checkpoint"))
    for i, (overrides, message) in enumerate(cases):
        workdir = tmp_path / f"run{i}"
        with pytest.raises(UserError, match=message):
            pretrain.train(_student_config(teacher, 2, **overrides), str(workdir),
                           devices=jax.devices()[:1])
        assert not (workdir / "checkpoints").exists()


def test_distilbert_base_shape():
    """DistilBERT's 66M: 6 of BERT-Base's layers, no token types, no pooler."""
    out = pretrain.describe(load_config("distilbert_base.py"))
    assert abs(out["student_encoder_params"] / 66e6 - 1) < 0.01, out
    assert (out["student_encoder_params"], out["student_params"]) == (66_362_880, 66_985_530)


def test_distilbert_matches_hf_and_round_trips(tmp_path):
    """A DistilBERT (random weights) exports as DistilBertForMaskedLM: logits within
    1e-4 on real sentences padded in a batch, and reads back bit for bit."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from flax import linen as nn
    from pretrainx.data.tokenizers import load_tokenizer
    from pretrainx.interop import hf
    from pretrainx.families.bert import model as bert
    from pretrainx.families.distilbert import model as distilbert
    cfg = distilbert.default_config()
    cfg.update(num_layers=2, hidden_size=64, num_heads=4, mlp_dim=128, vocab_size=4096,
               dropout_rate=0.0, attention_dropout_rate=0.0)
    tokenizer = load_tokenizer(SPM)
    texts = [open(ALICE, encoding="utf-8").read()[5000 + 300 * i:5000 + 300 * i + 200 - 60 * i]
             for i in range(3)]
    rows = [[tokenizer.cls_id] + tokenizer.encode(t) + [tokenizer.sep_id] for t in texts]
    length = max(map(len, rows))
    ids = np.full((3, length), tokenizer.pad_id, np.int32)
    mask = np.zeros((3, length), np.int32)
    for i, row in enumerate(rows):
        ids[i, :len(row)], mask[i, :len(row)] = row, 1
    batch = {"input_ids": ids, "token_type_ids": np.zeros_like(ids), "attention_mask": mask,
             "masked_lm_positions": np.tile(np.arange(length, dtype=np.int32), (3, 1))}
    model = bert.BertForMaskedLM(cfg)
    params = jax.device_get(nn.unbox(jax.jit(model.init)(jax.random.key(1), batch)["params"]))
    params = jax.tree_util.tree_map(lambda x: np.asarray(x, np.float32), params)
    assert "type_embed" not in params["bert"]
    pretrained = interop.Pretrained(model=cfg, params=params, tokenizer=SPM, lower_case=True,
                                    head="mlm", source="test")
    hf.save(pretrained, str(tmp_path))
    theirs = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    assert type(theirs).__name__ == "DistilBertForMaskedLM"
    with torch.no_grad():
        logits = theirs(input_ids=torch.tensor(ids, dtype=torch.long),
                        attention_mask=torch.tensor(mask, dtype=torch.long)).logits.numpy()
    mine = np.asarray(jax.jit(model.apply)({"params": params}, batch)["mlm_logits"])
    assert np.abs(mine - logits)[mask.astype(bool)].max() <= 1e-4
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path)
    encoded = hf_tokenizer(texts[0], return_tensors="pt")  # no token_type_ids for DistilBERT
    assert encoded["input_ids"][0].tolist() == rows[0] and "token_type_ids" not in encoded
    with torch.no_grad():
        alone = theirs(**encoded).logits.numpy()[0]
    assert np.abs(alone - logits[0, :len(rows[0])]).max() <= 1e-4
    back = interop.load(str(tmp_path))
    assert (back.family, back.head) == ("distilbert", "mlm")
    assert _same(back.params, params)
    assert jax.tree_util.tree_structure(back.params) == jax.tree_util.tree_structure(params)


@pytest.mark.slow
def test_a_distillation_continues_from_a_student_it_is_given(teacher, tmp_path):
    """init_from a student (a finished distillation, as an exported DistilBERT would be
    given): the run's "student" starts from it (after one step at warmup's rate 0, bit
    for bit), not from random weights; before, nothing of it found a place in the run's
    tree."""
    from pretrainx import interop
    first = str(tmp_path / "first")
    pretrain.train(_student_config(teacher, 2), first, devices=jax.devices()[:1])
    cfg = _student_config(teacher, 1, **{"init_from": first, "optimizer.warmup_steps": 1})
    pretrain.train(cfg, str(tmp_path / "w"), devices=jax.devices()[:1])
    given, continued = interop.load(first), interop.load(str(tmp_path / "w"))
    for (path, a), (_, b) in zip(jax.tree_util.tree_leaves_with_path(given.params),
                                 jax.tree_util.tree_leaves_with_path(continued.params)):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), path
